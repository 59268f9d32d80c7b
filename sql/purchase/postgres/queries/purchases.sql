-- The purchase saga's own rows.
-- PostgreSQL; sql/purchase/sqlite/queries/purchases.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.

-- name: insert_purchase
-- The purchase's own row, holding the seat its first state says (counted just before).
INSERT INTO purchases (saga_id, intensive_id, student_id, amount_minor, currency, seat)
VALUES (:saga_id, :intensive_id, :student_id, :amount_minor, :currency, :seat);

-- name: purchase_seat
-- Where a purchase's seat is, locked with the saga's transaction.
SELECT intensive_id, seat FROM purchases WHERE saga_id = :saga_id FOR UPDATE;

-- name: set_purchase_seat
-- Compare-and-set the seat of one purchase.
UPDATE purchases SET seat = :to_seat
WHERE saga_id = :saga_id AND seat = :from_seat;

-- name: get_purchase
-- One purchase with its saga and operation id.
SELECT s.id, o.operation_id, p.intensive_id, p.student_id, p.amount_minor, p.currency, p.seat,
       s.state, s.version, s.data, s.deadline_at, s.deadline_event, s.created_at, s.updated_at
FROM purchases p
JOIN sagas s ON s.id = p.saga_id
LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE p.saga_id = :saga_id;

-- name: list_purchases
-- Purchases, newest first, optionally of one state and one intensive.
SELECT s.id, o.operation_id, p.intensive_id, p.student_id, p.amount_minor, p.currency, p.seat,
       s.state, s.version, s.data, s.deadline_at, s.deadline_event, s.created_at, s.updated_at
FROM purchases p
JOIN sagas s ON s.id = p.saga_id
LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE (CAST(:state AS text) IS NULL OR s.state = :state)
  AND (CAST(:intensive_id AS text) IS NULL OR p.intensive_id = :intensive_id)
ORDER BY s.created_at DESC, s.id COLLATE "C" DESC
LIMIT :limit;

-- name: seat_ledger
-- Per intensive: the counters and what the purchases' own seats add up to.
SELECT i.id, i.capacity, i.held, i.taken,
       count(p.saga_id) FILTER (WHERE p.seat = 'held') AS purchases_held,
       count(p.saga_id) FILTER (WHERE p.seat = 'taken') AS purchases_taken
FROM intensives i
LEFT JOIN purchases p ON p.intensive_id = i.id
GROUP BY i.id, i.capacity, i.held, i.taken
ORDER BY i.id;

-- name: student_seat
-- The purchase through which a student holds or has a seat of an intensive, if any.
SELECT saga_id FROM purchases
WHERE intensive_id = :intensive_id AND student_id = :student_id AND seat <> 'free';

-- name: record_payment_intent
-- Write the payment intent before calling the provider, only while the
-- purchase's hold runs by the database clock; an existing one stays (nothing
-- comes back then, nor when the hold ran out: the new intent does).
-- stale_writes counts a write made under a lease that was no longer valid
-- (a fencing witness for `saga verify`: it must stay 0).
INSERT INTO payments (saga_id, key, amount_minor, currency, method, stale_writes)
SELECT :saga_id, :key, :amount_minor, :currency, :method,
        CASE WHEN CAST(:job_id AS text) IS NULL OR EXISTS (
        SELECT 1 FROM jobs WHERE id = :job_id AND state = 'running'
          AND lease_token = :lease_token AND lease_until > clock_timestamp()) THEN 0 ELSE 1 END
WHERE NOT EXISTS (SELECT 1 FROM sagas WHERE id = :saga_id AND deadline_at <= clock_timestamp())
ON CONFLICT (saga_id) DO NOTHING
RETURNING saga_id, key, amount_minor, currency, method, status, provider_ref, charged_minor,
          charged_currency, created_at, updated_at;

-- name: get_payment
-- A purchase's payment intent and what the provider said about it.
SELECT saga_id, key, amount_minor, currency, method, status, provider_ref, charged_minor,
       charged_currency, created_at, updated_at
FROM payments WHERE saga_id = :saga_id;

-- name: payment_by_ref
-- The payment the provider knows under its own id.
SELECT saga_id, key, amount_minor, currency, method, status, provider_ref, charged_minor,
       charged_currency, created_at, updated_at
FROM payments WHERE provider_ref = :provider_ref;

-- name: record_payment_answer
-- What the provider said about a payment.  Money is never rewritten: a
-- settled record (succeeded, failed, cancelled) takes only the very same
-- answer again, and the engine's own 'unknown' marker never covers what the
-- provider said.  No row back: the answer contradicts the record (the caller
-- keeps it as evidence for reconciliation).
UPDATE payments
SET status = :status,
    provider_ref = coalesce(provider_ref, :provider_ref),
    charged_minor = :charged_minor,
    charged_currency = :charged_currency,
    updated_at = clock_timestamp(),
    stale_writes = stale_writes + CASE WHEN CAST(:job_id AS text) IS NULL OR EXISTS (
        SELECT 1 FROM jobs WHERE id = :job_id AND state = 'running'
          AND lease_token = :lease_token AND lease_until > clock_timestamp()) THEN 0 ELSE 1 END
WHERE saga_id = :saga_id
  AND (status IN ('intent', 'unknown')
       OR (status = 'pending' AND :status <> 'unknown')
       OR (status = :status AND charged_minor IS NOT DISTINCT FROM :charged_minor
           AND charged_currency IS NOT DISTINCT FROM :charged_currency))
RETURNING status;

-- name: record_refund_intent
-- Write the refund intent before calling the provider; one per payment.
INSERT INTO refunds (saga_id, payment_key, key, amount_minor, currency, reason, stale_writes)
VALUES (:saga_id, :payment_key, :key, :amount_minor, :currency, :reason,
        CASE WHEN CAST(:job_id AS text) IS NULL OR EXISTS (
        SELECT 1 FROM jobs WHERE id = :job_id AND state = 'running'
          AND lease_token = :lease_token AND lease_until > clock_timestamp()) THEN 0 ELSE 1 END)
ON CONFLICT (saga_id) DO NOTHING;

-- name: get_refund
-- A purchase's refund.
SELECT saga_id, payment_key, key, amount_minor, currency, status, provider_ref, reason,
       created_at, updated_at
FROM refunds WHERE saga_id = :saga_id;

-- name: refund_by_ref
-- The refund the provider knows under its own id.
SELECT saga_id, payment_key, key, amount_minor, currency, status, provider_ref, reason,
       created_at, updated_at
FROM refunds WHERE provider_ref = :provider_ref;

-- name: record_refund_answer
-- What the provider said about a refund; like payments, a settled refund is
-- never rewritten and no row back means the answer contradicts the record.
UPDATE refunds
SET status = :status,
    provider_ref = coalesce(provider_ref, :provider_ref),
    updated_at = clock_timestamp(),
    stale_writes = stale_writes + CASE WHEN CAST(:job_id AS text) IS NULL OR EXISTS (
        SELECT 1 FROM jobs WHERE id = :job_id AND state = 'running'
          AND lease_token = :lease_token AND lease_until > clock_timestamp()) THEN 0 ELSE 1 END
WHERE saga_id = :saga_id
  AND (status IN ('intent', 'unknown')
       OR (status = 'pending' AND :status <> 'unknown')
       OR status = :status)
RETURNING status;

-- name: grant_access
-- Give a confirmed purchase's student access; once.
INSERT INTO access_grants (saga_id, student_id) VALUES (:saga_id, :student_id)
ON CONFLICT (saga_id) DO NOTHING;

-- name: revoke_access
-- Take access back from a refunded purchase.
UPDATE access_grants SET revoked_at = coalesce(revoked_at, clock_timestamp())
WHERE saga_id = :saga_id;

-- name: purchase_progress
-- The state of every purchase of these intensives, with the owner of its open item.
SELECT s.id, s.state, r.owner
FROM purchases p
JOIN sagas s ON s.id = p.saga_id
LEFT JOIN recon_items r ON r.saga_id = s.id AND r.status = 'open' AND r.kind = 'outcome'
WHERE p.intensive_id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:intensive_ids AS jsonb))));

-- name: payment_request_lag
-- Per purchase of these intensives: seconds from acceptance to the payment intent.
SELECT EXTRACT(EPOCH FROM pay.created_at - s.created_at) AS lag_s
FROM payments pay
JOIN sagas s ON s.id = pay.saga_id
JOIN purchases p ON p.saga_id = s.id
WHERE p.intensive_id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:intensive_ids AS jsonb))));

-- name: demo_jobs_left
-- Pending jobs of the whole database by queue and kind, with the seconds until
-- the first and the last is due (the demo drains what is due soon, and names the rest).
SELECT queue, kind, count(*) AS pending,
       GREATEST(0, EXTRACT(EPOCH FROM min(available_at) - clock_timestamp())) AS first_due_in_s,
       GREATEST(0, EXTRACT(EPOCH FROM max(available_at) - clock_timestamp())) AS last_due_in_s
FROM jobs
WHERE state = 'pending'
GROUP BY queue, kind
ORDER BY queue, kind;
