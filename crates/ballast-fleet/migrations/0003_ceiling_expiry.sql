-- Version 3: an announced ceiling expires. A system's `RateLimit-Policy`
-- lowers the fleet's ceiling for its window, at most `max_hold`, not for
-- good (`ceiling_until`); a replica's start or reload resets what the fleet
-- learned (`p_reset`). Additive: the previous version's replicas call the
-- ten-argument lease, which stays; a ceiling they set without an end is
-- given one, `max_hold` from the first lease of this version that sees it.
ALTER TABLE ballast_fleet_limits ADD COLUMN IF NOT EXISTS ceiling_until TIMESTAMPTZ;

CREATE OR REPLACE FUNCTION ballast_fleet_lease(
    p_system TEXT, p_want DOUBLE PRECISION, p_configured DOUBLE PRECISION, p_burst DOUBLE PRECISION,
    p_adaptive BOOLEAN, p_throttles BIGINT, p_announced DOUBLE PRECISION, p_hold_ms DOUBLE PRECISION,
    p_max_hold_ms DOUBLE PRECISION, p_floor DOUBLE PRECISION, p_announced_for_ms DOUBLE PRECISION,
    p_reset BOOLEAN)
RETURNS TABLE (granted DOUBLE PRECISION, rate DOUBLE PRECISION, held_ms DOUBLE PRECISION)
LANGUAGE plpgsql AS $$
DECLARE
    l ballast_fleet_limits%ROWTYPE;
    t TIMESTAMPTZ := clock_timestamp();
    rate_now DOUBLE PRECISION;
    avail DOUBLE PRECISION;
    g DOUBLE PRECISION := 0;
BEGIN
    INSERT INTO ballast_fleet_limits
        (system, configured, burst, ceiling, decided, decided_at, tokens, refilled_at, held_until)
    VALUES (p_system, p_configured, p_burst, p_configured, p_configured, t, p_burst, t, t)
    ON CONFLICT (system) DO NOTHING;
    SELECT * INTO l FROM ballast_fleet_limits WHERE system = p_system FOR UPDATE;
    IF l.configured <> p_configured OR l.burst <> p_burst OR p_reset THEN
        l.configured := p_configured; l.burst := p_burst; l.ceiling := p_configured;
        l.decided := p_configured; l.decided_at := t; l.tokens := least(l.tokens, p_burst);
        l.ceiling_until := NULL;
        IF p_reset THEN l.held_until := least(l.held_until, t); END IF;
    END IF;
    IF l.ceiling < l.configured THEN
        IF l.ceiling_until IS NULL THEN
            l.ceiling_until := t + p_max_hold_ms * interval '1 millisecond';
        ELSIF l.ceiling_until <= t THEN
            l.ceiling := l.configured; l.decided := l.configured; l.decided_at := t;
            l.ceiling_until := NULL;
        END IF;
    END IF;
    IF p_adaptive THEN
        rate_now := least(l.ceiling, l.decided * (1 + 0.02 * extract(epoch FROM t - l.decided_at)));
        IF p_announced > 0 THEN
            l.ceiling := greatest(p_announced, p_configured * p_floor);
            l.decided := l.ceiling; l.decided_at := t; rate_now := l.ceiling;
            l.ceiling_until := t + least(
                CASE WHEN p_announced_for_ms > 0 THEN p_announced_for_ms ELSE p_max_hold_ms END,
                p_max_hold_ms) * interval '1 millisecond';
        END IF;
        IF p_throttles > 0 AND t - l.decided_at >= interval '1 second' THEN
            l.decided := greatest(l.ceiling * p_floor, rate_now * 0.9); l.decided_at := t;
            rate_now := l.decided;
        END IF;
        IF p_hold_ms > 0 THEN
            l.held_until := greatest(l.held_until, t + least(p_hold_ms, p_max_hold_ms) * interval '1 millisecond');
        END IF;
    ELSE
        rate_now := l.configured;
    END IF;
    avail := least(l.burst, l.tokens + rate_now * greatest(extract(epoch FROM t - l.refilled_at), 0));
    IF l.held_until <= t THEN
        g := greatest(least(p_want, floor(avail)), 0);
    END IF;
    UPDATE ballast_fleet_limits SET
        configured = l.configured, burst = l.burst, ceiling = l.ceiling, decided = l.decided,
        decided_at = l.decided_at, tokens = avail - g, refilled_at = t, held_until = l.held_until,
        granted = l.granted + g, ceiling_until = l.ceiling_until
    WHERE system = p_system;
    RETURN QUERY SELECT g, rate_now, greatest(extract(epoch FROM l.held_until - t) * 1000, 0)::DOUBLE PRECISION;
END
$$;
