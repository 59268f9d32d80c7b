-- The sandbox's card holds (version 2 purchases): authorizations, captures, voids.
-- SQLite; sql/sandbox/postgres/queries/holds.sql defines the same names.

-- name: insert_authorization
-- Record an authorization under its idempotency key; nothing if the key exists.
INSERT INTO sandbox_authorizations (authorization_id, key, params_digest, reference, method,
                                    amount_minor, authorized_minor, currency, status)
VALUES (:authorization_id, :key, :params_digest, :reference, :method, :amount_minor,
        :authorized_minor, :currency, :status)
ON CONFLICT (key) DO NOTHING
RETURNING authorization_id;

-- name: authorization_by_key
-- The authorization made under a key.
SELECT authorization_id, key, params_digest, reference, method, amount_minor, authorized_minor,
       currency, status, capture_id, void_key
FROM sandbox_authorizations WHERE key = :key;

-- name: lock_authorization
-- One authorization, (the write lock is already held).
SELECT authorization_id, key, params_digest, reference, method, amount_minor, authorized_minor,
       currency, status, capture_id, void_key
FROM sandbox_authorizations WHERE authorization_id = :authorization_id;

-- name: authorization_by_void_key
-- The authorization a void key released.
SELECT authorization_id, key, params_digest, reference, method, amount_minor, authorized_minor,
       currency, status, capture_id, void_key
FROM sandbox_authorizations WHERE void_key = :void_key;

-- name: set_authorization_status
-- Compare-and-set an authorization's status, with what the change records.
UPDATE sandbox_authorizations
SET status = :to_status, authorized_minor = coalesce(:authorized_minor, authorized_minor),
    capture_id = coalesce(:capture_id, capture_id), void_key = coalesce(:void_key, void_key),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE authorization_id = :authorization_id AND status = :from_status;

-- name: settle_due_authorizations
-- Authorizations that settle some time after they were asked (pm_stale_failure_first)
-- are authorized once that time has passed: read lazily, before anything else looks.
UPDATE sandbox_authorizations
SET status = 'authorized', authorized_minor = amount_minor,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE method = :method AND status = 'pending'
  AND created_at <= strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') - :settle_seconds / 86400.0);

-- name: expire_authorizations
-- Holds nobody captured or voided lapse after a while, as at real providers.
UPDATE sandbox_authorizations
SET status = 'expired', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE status = 'authorized'
  AND created_at <= strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') - :lifetime_seconds / 86400.0);

-- name: ledger_authorizations
-- Every authorization.
SELECT authorization_id, key, reference, method, amount_minor, authorized_minor, currency,
       status, capture_id, void_key, created_at
FROM sandbox_authorizations ORDER BY created_at, authorization_id;
