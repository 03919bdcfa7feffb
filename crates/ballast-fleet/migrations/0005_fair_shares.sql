-- Permits shared in proportion to each replica's demand. Without it a
-- saturated bucket went to whichever replica leased first: each leased the
-- moment it ran out, and two replicas with evenly split callers sent 3:1.
--
-- Each replica says its pace (permits a second it asks for, those waiting
-- included) with every lease. While the replicas heard from in the last
-- second ask for more than the fleet's rate, each earns its share of the
-- rate as credit — rate × its pace / their paces, kept for at most a
-- lease interval and a permit's life — and takes its credit, or what the
-- bucket holds beyond the credit of the others; below the rate nobody is
-- held back. A replica of an earlier version leases through the
-- twelve-argument function and earns no credit: its leases take as before.
CREATE TABLE IF NOT EXISTS ballast_fleet_shares (
    system  TEXT             NOT NULL,
    replica UUID             NOT NULL,
    pace    DOUBLE PRECISION NOT NULL,
    credit  DOUBLE PRECISION NOT NULL,
    seen_at TIMESTAMPTZ      NOT NULL,
    PRIMARY KEY (system, replica)
);

CREATE OR REPLACE FUNCTION ballast_fleet_lease(
    p_system TEXT, p_replica UUID, p_pace DOUBLE PRECISION, p_want DOUBLE PRECISION,
    p_configured DOUBLE PRECISION, p_burst DOUBLE PRECISION, p_adaptive BOOLEAN, p_throttles BIGINT,
    p_announced DOUBLE PRECISION, p_hold_ms DOUBLE PRECISION, p_max_hold_ms DOUBLE PRECISION,
    p_floor DOUBLE PRECISION, p_announced_for_ms DOUBLE PRECISION, p_reset BOOLEAN,
    p_keep_ms DOUBLE PRECISION)
RETURNS TABLE (granted DOUBLE PRECISION, rate DOUBLE PRECISION, held_ms DOUBLE PRECISION)
LANGUAGE plpgsql AS $$
DECLARE
    t TIMESTAMPTZ := clock_timestamp();
    lease RECORD;
    mine ballast_fleet_shares%ROWTYPE;
    paces DOUBLE PRECISION;
    owed DOUBLE PRECISION;
    share DOUBLE PRECISION;
    credit DOUBLE PRECISION;
    g DOUBLE PRECISION;
    allowed DOUBLE PRECISION;
    left_over DOUBLE PRECISION;
BEGIN
    -- The bucket's row stays locked to the end of this call: the
    -- twelve-argument lease takes it, and what this one gives back is
    -- given back before any other lease reads it.
    SELECT * INTO lease FROM ballast_fleet_lease(
        p_system, p_want, p_configured, p_burst, p_adaptive, p_throttles, p_announced, p_hold_ms,
        p_max_hold_ms, p_floor, p_announced_for_ms, p_reset);
    g := lease.granted;
    SELECT coalesce(sum(s.pace), 0) INTO paces FROM ballast_fleet_shares s
    WHERE s.system = p_system AND s.replica <> p_replica AND s.pace > 0
      AND s.seen_at > t - interval '1 second';
    paces := paces + greatest(p_pace, 0);
    SELECT * INTO mine FROM ballast_fleet_shares s
    WHERE s.system = p_system AND s.replica = p_replica FOR UPDATE;
    IF NOT FOUND THEN
        -- A replica's first lease clears the rows of replicas long gone.
        DELETE FROM ballast_fleet_shares s WHERE s.system = p_system AND s.seen_at < t - interval '1 hour';
    END IF;
    share := CASE WHEN paces > 0 THEN lease.rate * greatest(p_pace, 0) / paces ELSE 0 END;
    credit := least(
        coalesce(mine.credit, 0)
            + share * least(greatest(extract(epoch FROM t - coalesce(mine.seen_at, t)), 0), 1),
        share * p_keep_ms / 1000 + 1);
    IF paces > lease.rate THEN
        -- What the others have earned and not yet taken, to now.
        SELECT coalesce(sum(least(
                s.credit + lease.rate * s.pace / paces * least(extract(epoch FROM t - s.seen_at), 1),
                lease.rate * s.pace / paces * p_keep_ms / 1000 + 1)), 0)
            INTO owed FROM ballast_fleet_shares s
        WHERE s.system = p_system AND s.replica <> p_replica AND s.pace > 0
          AND s.seen_at > t - interval '1 second';
        SELECT l.tokens INTO left_over FROM ballast_fleet_limits l WHERE l.system = p_system;
        allowed := greatest(floor(credit), floor(left_over + g - owed), 0);
        IF g > allowed THEN
            UPDATE ballast_fleet_limits l SET tokens = l.tokens + (g - allowed), granted = l.granted - (g - allowed)
            WHERE l.system = p_system;
            g := allowed;
        END IF;
    END IF;
    INSERT INTO ballast_fleet_shares (system, replica, pace, credit, seen_at)
    VALUES (p_system, p_replica, greatest(p_pace, 0), greatest(credit - g, 0), t)
    ON CONFLICT (system, replica) DO UPDATE
        SET pace = excluded.pace, credit = excluded.credit, seen_at = excluded.seen_at;
    RETURN QUERY SELECT g, lease.rate, lease.held_ms;
END
$$;
