-- Version 7: keys bound to their requests. Every keyed write a gateway
-- forwards, live or deferred, binds its idempotency key to the request's
-- fingerprint for as long as the system remembers the key (its key_ttl):
-- another request under the key is refused before anything is sent, after
-- the write's task has been pruned too. Scoped by system and caller: a key
-- is the system's, and one caller's key never refuses another's request.
-- The scope is 16 bytes of a SHA-256 over the system, the caller's digest
-- and the key, so a binding stays small (a day of keys at 1,000/s is 86.4
-- million rows) and the table holds no key in clear.
CREATE TABLE IF NOT EXISTS ballast_bound_keys (
    scope       BLOB        PRIMARY KEY,
    fingerprint TEXT        NOT NULL,
    expires_at  INTEGER     NOT NULL
);

-- Retention deletes expired bindings oldest first along it.
CREATE INDEX IF NOT EXISTS ballast_bound_keys_expiry ON ballast_bound_keys (expires_at);
