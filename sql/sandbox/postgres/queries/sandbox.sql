-- Named queries of the sandbox payment provider on PostgreSQL.
-- sql/sqlite/sandbox/queries.sql defines the same names.

-- name: insert_charge
-- Record a charge under its idempotency key; nothing if the key exists.
INSERT INTO sandbox_charges (payment_id, key, params_digest, reference, method, amount_minor,
                             charged_minor, currency, status)
VALUES (:payment_id, :key, :params_digest, :reference, :method, :amount_minor, :charged_minor,
        :currency, :status)
ON CONFLICT (key) DO NOTHING
RETURNING payment_id;

-- name: charge_by_key
-- The charge made under a key.
SELECT payment_id, key, params_digest, reference, method, amount_minor, charged_minor, currency,
       status
FROM sandbox_charges WHERE key = :key;

-- name: lock_charge
-- The charge made under a key, locked to change its status.
SELECT payment_id, key, params_digest, reference, method, amount_minor, charged_minor, currency,
       status
FROM sandbox_charges WHERE key = :key FOR UPDATE;

-- name: charge_by_id
-- One charge.
SELECT payment_id, key, params_digest, reference, method, amount_minor, charged_minor, currency,
       status
FROM sandbox_charges WHERE payment_id = :payment_id;

-- name: set_charge_status
-- Compare-and-set a charge's status.
UPDATE sandbox_charges
SET status = :to_status, charged_minor = coalesce(:charged_minor, charged_minor),
    updated_at = clock_timestamp()
WHERE payment_id = :payment_id AND status = :from_status;

-- name: settle_due_charges
-- Charges that settle some time after they were made (pm_stale_failure_first)
-- succeed once that time has passed: read lazily, before anything else looks.
UPDATE sandbox_charges
SET status = 'succeeded', charged_minor = amount_minor, updated_at = clock_timestamp()
WHERE method = :method AND status = 'pending'
  AND created_at <= clock_timestamp() - make_interval(secs => CAST(:settle_seconds AS double precision));

-- name: insert_refund
-- Record a refund under its idempotency key; nothing if the key exists.
INSERT INTO sandbox_refunds (refund_id, key, params_digest, payment_id, amount_minor, status)
VALUES (:refund_id, :key, :params_digest, :payment_id, :amount_minor, :status)
ON CONFLICT (key) DO NOTHING
RETURNING refund_id;

-- name: refund_by_key
-- The refund made under a key.
SELECT refund_id, key, params_digest, payment_id, amount_minor, status
FROM sandbox_refunds WHERE key = :key;

-- name: refunded_minor
-- What was already given back (or is on its way) for a charge.
SELECT coalesce(sum(amount_minor), 0) FROM sandbox_refunds
WHERE payment_id = :payment_id AND status IN ('pending', 'succeeded');

-- name: queue_webhook
-- A webhook for the engine, deliverable after a delay.
INSERT INTO sandbox_webhooks (event_id, type, body, deliver_at)
VALUES (:event_id, :type, CAST(:body AS jsonb),
        clock_timestamp() + make_interval(secs => CAST(:delay_seconds AS double precision)));

-- name: claim_webhooks
-- Due webhooks, leased to one deliverer for a while (delivery is at least once).
WITH due AS (
    SELECT id FROM sandbox_webhooks
    WHERE delivered_at IS NULL AND deliver_at <= clock_timestamp()
      AND (lease_until IS NULL OR lease_until < clock_timestamp())
    ORDER BY deliver_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE sandbox_webhooks w
SET lease_until = clock_timestamp() + make_interval(secs => CAST(:lease_seconds AS double precision))
FROM due WHERE w.id = due.id
RETURNING w.id, w.event_id, w.type, w.body;

-- name: mark_webhook_delivered
-- The engine's inbox has the event.
UPDATE sandbox_webhooks SET delivered_at = clock_timestamp(), lease_until = NULL WHERE id = :id;

-- name: next_webhook_in
-- Seconds until the next undelivered webhook is due (NULL: none).
-- (GREATEST ignores NULL: without the CASE no webhook would read "due now".)
SELECT CASE WHEN min(deliver_at) IS NULL THEN NULL
            ELSE GREATEST(0, EXTRACT(EPOCH FROM min(deliver_at) - clock_timestamp())) END
FROM sandbox_webhooks WHERE delivered_at IS NULL;

-- name: ledger_charges
-- Every charge.
SELECT payment_id, key, reference, method, amount_minor, charged_minor, currency, status,
       created_at
FROM sandbox_charges ORDER BY created_at, payment_id;

-- name: ledger_refunds
-- Every refund.
SELECT r.refund_id, r.payment_id, r.key, r.amount_minor, r.status, c.reference, r.created_at
FROM sandbox_refunds r JOIN sandbox_charges c ON c.payment_id = r.payment_id
ORDER BY r.created_at, r.refund_id;

-- name: lock_setup
-- Serialize concurrent creations of the sandbox's tables.
SELECT pg_advisory_xact_lock(:key);

-- name: ledger_exists
-- Whether the sandbox's tables exist here.
SELECT to_regclass('sandbox_charges') IS NOT NULL;
