-- Facts for the purchase's invariants in `saga verify`, read straight from its tables.
-- PostgreSQL; sql/purchase/sqlite/queries/verify.sql defines the same names.

-- name: verify_purchases
-- Every purchase: state, seat, where it came from, price, and how long it has been there.
SELECT s.id, s.state, s.version, p.seat, p.intensive_id, p.amount_minor, p.currency,
       s.data ->> '_previous_state' AS previous_state,
       CAST(s.data ->> 'hold_seconds' AS double precision) AS hold_seconds,
       EXTRACT(EPOCH FROM clock_timestamp() - s.entered_at) AS in_state_s
FROM purchases p JOIN sagas s ON s.id = p.saga_id
ORDER BY s.id;

-- name: verify_payments
-- Every payment record, with the purchase's price.
SELECT p.saga_id, p.key, p.status, p.provider_ref, p.charged_minor, p.charged_currency,
       p.amount_minor, p.currency, p.stale_writes
FROM payments p ORDER BY p.saga_id;

-- name: verify_refunds
-- Every refund record.
SELECT r.saga_id, r.key, r.payment_key, r.status, r.provider_ref, r.amount_minor, r.currency,
       r.stale_writes
FROM refunds r ORDER BY r.saga_id;

-- name: verify_external
-- Money moved outside the provider, per purchase and direction.
SELECT saga_id, direction, sum(amount_minor) AS amount_minor, count(*) AS movements
FROM external_movements GROUP BY saga_id, direction ORDER BY saga_id, direction;

-- name: verify_access
-- Access granted to purchases, and whether it was taken back.
SELECT saga_id, revoked_at FROM access_grants ORDER BY saga_id;

-- name: verify_event_reviews
-- The evidence of every item: a contradicting provider event opens a review
-- or joins the saga's open item.
SELECT id, evidence
FROM recon_items;

-- name: verify_expiries
-- Every hold that ran out after a payment was requested, with what the audit
-- row says the provider answered.
SELECT t.saga_id, t.version, t.payload
FROM saga_transitions t
JOIN payments pay ON pay.saga_id = t.saga_id AND pay.created_at < t.at
WHERE t.event = 'hold_expired';
