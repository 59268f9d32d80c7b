-- A finished history for bench/saga --history N, loaded in bulk (PostgreSQL):
-- :n confirmed purchases of one intensive, spread over the last 30 days, each
-- as the engine leaves it: saga, operation id, three audit rows, its archived
-- job and result, purchase row, payment, access grant, three published outbox
-- events and the provider's webhook in the inbox.

-- name: load_intensive
INSERT INTO intensives (id, capacity, price_minor, currency, held, taken)
VALUES ('hist', :n, 4900, 'EUR', 0, :n);

-- name: load_sagas
INSERT INTO sagas (id, kind, definition_version, state, version, data, created_at, entered_at,
                   updated_at)
SELECT 'hist-' || g, 'purchase', 1, 'confirmed', 3,
       jsonb_build_object('intensive_id', 'hist', 'student_id', 'hist-' || g,
                          'payment_method', 'pm_ok', 'amount_minor', 4900, 'currency', 'EUR'),
       t, t + interval '2 seconds', t + interval '2 seconds'
FROM generate_series(1, :n) AS g,
     LATERAL (SELECT clock_timestamp() - interval '30 days' * (g::float / :n) AS t) AS at_;

-- name: load_operations
INSERT INTO saga_operations (operation_id, kind, digest, saga_id)
SELECT 'hist-op-' || g, 'purchase', md5(g::text), 'hist-' || g FROM generate_series(1, :n) AS g;

-- name: load_transitions
INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, at)
SELECT s.id, v.version, v.from_state, v.to_state, v.event, v.actor,
       s.created_at + v.version * interval '1 second'
FROM sagas s
CROSS JOIN (VALUES (1, NULL, 'reserved', 'start', 'api'),
                   (2, 'reserved', 'payment_pending', 'payment_requested', 'worker'),
                   (3, 'payment_pending', 'confirmed', 'payment_succeeded', 'worker'))
     AS v (version, from_state, to_state, event, actor)
WHERE s.id LIKE 'hist-%';

-- name: load_archive
INSERT INTO job_archive (id, queue, kind, digest, saga_id, state, attempts, created_at,
                         finished_at)
SELECT 'step:' || s.id || ':1:request_payment', 'purchase', 'purchase.request_payment',
       md5(s.id), s.id, 'done', 1, s.created_at, s.created_at + interval '1 second'
FROM sagas s
WHERE s.id LIKE 'hist-%';

-- name: load_results
INSERT INTO job_results (job_id, result)
SELECT 'step:' || s.id || ':1:request_payment',
       jsonb_build_object('reading', 'paid', 'event', 'payment_succeeded', 'outcome', 'applied')
FROM sagas s
WHERE s.id LIKE 'hist-%';

-- name: load_purchases
INSERT INTO purchases (saga_id, intensive_id, student_id, amount_minor, currency, seat)
SELECT s.id, 'hist', s.id, 4900, 'EUR', 'taken' FROM sagas s WHERE s.id LIKE 'hist-%';

-- name: load_payments
INSERT INTO payments (saga_id, key, amount_minor, currency, method, status, provider_ref,
                      charged_minor, charged_currency, created_at, updated_at)
SELECT s.id, 'pay:' || s.id, 4900, 'EUR', 'pm_ok', 'succeeded', 'pay_' || s.id, 4900, 'EUR',
       s.created_at, s.created_at + interval '2 seconds'
FROM sagas s
WHERE s.id LIKE 'hist-%';

-- name: load_access
INSERT INTO access_grants (saga_id, student_id, granted_at)
SELECT s.id, s.id, s.created_at + interval '2 seconds' FROM sagas s WHERE s.id LIKE 'hist-%';

-- name: load_outbox
INSERT INTO outbox (event_id, type, schema_version, saga_id, saga_kind, saga_version, occurred_at,
                    data, created_at, available_at, attempts, published_at)
SELECT 'hist-evt-' || s.id || '-' || v.version, 'purchase.' || v.state, 1, s.id, 'purchase',
       v.version, s.created_at + v.version * interval '1 second', jsonb_build_object(),
       s.created_at, s.created_at, 1, s.created_at + v.version * interval '1 second'
FROM sagas s
CROSS JOIN (VALUES (1, 'reserved'), (2, 'payment_pending'), (3, 'confirmed')) AS v (version, state)
WHERE s.id LIKE 'hist-%';

-- name: load_inbox
INSERT INTO inbox (event_id, source, type, payment_ref, digest, payload, saga_id, outcome,
                   received_at)
SELECT 'hist-wh-' || s.id, 'sandbox', 'payment.succeeded', 'pay_' || s.id, md5(s.id),
       jsonb_build_object(), s.id, 'applied', s.created_at + interval '2 seconds'
FROM sagas s
WHERE s.id LIKE 'hist-%';

-- name: analyze
ANALYZE;
