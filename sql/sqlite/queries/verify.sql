-- Facts for `saga verify`: each invariant of DESIGN.md §2, read straight from the tables.
-- SQLite; sql/postgres/queries/verify.sql defines the same names.

-- name: verify_purchases
-- Every purchase: state, seat, where it came from, price, and how long it has been there.
SELECT s.id, s.state, s.version, p.seat, p.intensive_id, p.amount_minor, p.currency,
       json_extract(s.data, '$._previous_state') AS previous_state,
       CAST(json_extract(s.data, '$.hold_seconds') AS REAL) AS hold_seconds,
       (julianday('now') - julianday(s.entered_at)) * 86400.0 AS in_state_s
FROM purchases p JOIN sagas s ON s.id = p.saga_id
ORDER BY s.id;

-- name: verify_sagas_without_operation
-- Sagas whose accepting operation id is missing.
SELECT s.id FROM sagas s LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE o.saga_id IS NULL;

-- name: verify_transitions
-- The whole audit trail, per saga in version order.
SELECT t.saga_id, t.version, t.from_state, t.to_state, t.event, t.job_id, t.lease_valid,
       json_extract(t.payload, '$.event_id') AS event_id, s.kind, s.definition_version
FROM saga_transitions t JOIN sagas s ON s.id = t.saga_id
ORDER BY t.saga_id, t.version;

-- name: verify_saga_versions
-- Each saga's state and version, and how far past its deadline it is (NULL: none).
SELECT id, kind, definition_version, state, version, deadline_event,
       (julianday('now') - julianday(deadline_at)) * 86400.0 AS past_deadline_s
FROM sagas ORDER BY id;

-- name: verify_known_jobs
-- Which of these job ids exist, live or finished.
SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))
UNION ALL
SELECT id FROM job_archive WHERE id IN (SELECT value FROM json_each(:ids));

-- name: verify_open_items
-- Open reconciliation items with their saga's state, and how late their
-- deadline and next check are (negative: not yet due).
SELECT r.id, r.saga_id, r.kind, r.owner, r.next_check_at, r.overdue_at, r.attempts, s.state,
       (julianday('now') - julianday(r.deadline)) * 86400.0 AS past_deadline_s,
       (julianday('now') - julianday(r.next_check_at)) * 86400.0 AS past_check_s
FROM recon_items r JOIN sagas s ON s.id = r.saga_id
WHERE r.status = 'open';

-- name: verify_orphan_results
-- Results of jobs that are not archived as done (a write outside a completion).
SELECT r.job_id FROM job_results r
LEFT JOIN job_archive a ON a.id = r.job_id AND a.state = 'done'
WHERE a.id IS NULL;


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

-- name: verify_dead_letters
-- Jobs that gave up: each is work nobody will do unless an operator replays it.
SELECT id, kind, saga_id, error_class, last_error FROM jobs WHERE state = 'failed' ORDER BY id;

-- name: verify_inbox_effects
-- Provider events that moved a saga, by event id (at most one effect each).
SELECT json_extract(payload, '$.event_id') AS event_id, count(*) AS effects
FROM saga_transitions
WHERE json_extract(payload, '$.event_id') IS NOT NULL
GROUP BY json_extract(payload, '$.event_id')
HAVING count(*) > 1;
