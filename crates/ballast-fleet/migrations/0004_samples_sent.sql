-- The fleet chart tells attempts sent to a system apart from calls the
-- policy refused unsent: one sample's "calls" counted both. A replica of
-- an earlier version writes neither (they read 0 on its rows).
ALTER TABLE ballast_fleet_samples ADD COLUMN IF NOT EXISTS sent BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ballast_fleet_samples ADD COLUMN IF NOT EXISTS refused BIGINT NOT NULL DEFAULT 0;
