-- The fleet's shared state, beside the queue's table in the same database.
-- Every time is the database's own (now(), clock_timestamp()): replicas on
-- hosts with skewed clocks agree.

-- Every `ballast serve` of the fleet, heartbeating.
CREATE TABLE IF NOT EXISTS ballast_fleet_replicas (
    id            UUID PRIMARY KEY,
    host          TEXT        NOT NULL,
    pid           INTEGER     NOT NULL,
    version       TEXT        NOT NULL,
    config_digest TEXT        NOT NULL,
    admin         TEXT        NOT NULL DEFAULT '',
    started_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The replica's clock less the database's at its last heartbeat, ms.
    clock_skew_ms DOUBLE PRECISION NOT NULL DEFAULT 0,
    stopped_at    TIMESTAMPTZ
);

-- One token bucket per system whose rate limit has scope = "fleet": the
-- permits every replica leases from, and what the fleet learned of the
-- system's limit (the adaptive rate, a hold).
CREATE TABLE IF NOT EXISTS ballast_fleet_limits (
    system      TEXT PRIMARY KEY,
    configured  DOUBLE PRECISION NOT NULL,
    burst       DOUBLE PRECISION NOT NULL,
    ceiling     DOUBLE PRECISION NOT NULL,
    decided     DOUBLE PRECISION NOT NULL,
    decided_at  TIMESTAMPTZ      NOT NULL,
    tokens      DOUBLE PRECISION NOT NULL,
    refilled_at TIMESTAMPTZ      NOT NULL,
    held_until  TIMESTAMPTZ      NOT NULL,
    granted     DOUBLE PRECISION NOT NULL DEFAULT 0
);

-- Each replica's own breaker verdict, per system with scope = "fleet".
CREATE TABLE IF NOT EXISTS ballast_fleet_verdicts (
    system     TEXT        NOT NULL,
    replica    UUID        NOT NULL,
    open       BOOLEAN     NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    seen_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (system, replica)
);

-- The fleet's breaker per system: open when a quorum of replicas sees the
-- system failing; while open, one replica at a time holds the probe.
CREATE TABLE IF NOT EXISTS ballast_fleet_breakers (
    system       TEXT PRIMARY KEY,
    open         BOOLEAN     NOT NULL DEFAULT false,
    changed_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    half_open_at TIMESTAMPTZ,
    probe_holder UUID,
    probe_until  TIMESTAMPTZ
);

-- What each replica did per system, every few seconds, for the dashboard's
-- fleet charts (the last 15 minutes are kept).
CREATE TABLE IF NOT EXISTS ballast_fleet_samples (
    replica   UUID        NOT NULL,
    system    TEXT        NOT NULL,
    at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    calls     BIGINT      NOT NULL,
    throttled BIGINT      NOT NULL,
    breaker   TEXT        NOT NULL,
    PRIMARY KEY (replica, system, at)
);
CREATE INDEX IF NOT EXISTS ballast_fleet_samples_at ON ballast_fleet_samples (at);

-- A lease of up to p_want permits of p_system's bucket, in one round trip:
-- the bucket refills at the fleet's rate now (the configured one; adaptive:
-- the last decision climbing 2 % a second to the ceiling), what the replica
-- heard from the system since its last lease is applied first (a throttle
-- lowers the rate to 0.9 of itself, at most once a second fleet-wide; an
-- announced rate is the new ceiling and rate, never under p_floor of the
-- configured one; a hold, at most p_max_hold_ms), and no permit is granted
-- while the fleet is held. A new rate or burst in the configuration starts
-- the bucket afresh.
CREATE OR REPLACE FUNCTION ballast_fleet_lease(
    p_system TEXT, p_want DOUBLE PRECISION, p_configured DOUBLE PRECISION, p_burst DOUBLE PRECISION,
    p_adaptive BOOLEAN, p_throttles BIGINT, p_announced DOUBLE PRECISION, p_hold_ms DOUBLE PRECISION,
    p_max_hold_ms DOUBLE PRECISION, p_floor DOUBLE PRECISION)
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
    IF l.configured <> p_configured OR l.burst <> p_burst THEN
        l.configured := p_configured; l.burst := p_burst; l.ceiling := p_configured;
        l.decided := p_configured; l.decided_at := t; l.tokens := least(l.tokens, p_burst);
    END IF;
    IF p_adaptive THEN
        rate_now := least(l.ceiling, l.decided * (1 + 0.02 * extract(epoch FROM t - l.decided_at)));
        IF p_announced > 0 THEN
            l.ceiling := greatest(p_announced, p_configured * p_floor);
            l.decided := l.ceiling; l.decided_at := t; rate_now := l.ceiling;
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
        granted = l.granted + g
    WHERE system = p_system;
    RETURN QUERY SELECT g, rate_now, greatest(extract(epoch FROM l.held_until - t) * 1000, 0)::DOUBLE PRECISION;
END
$$;
