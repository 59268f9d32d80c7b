-- A finished history for the console's timings, loaded in bulk (PostgreSQL).
-- :n purchases, confirmed, spread over the last 30 days: each with its three
-- audit rows, its operation id and two archived jobs, as the engine leaves them.

-- name: load_sagas
INSERT INTO sagas (id, kind, definition_version, state, version, data, created_at, entered_at,
                   updated_at)
SELECT 'hist-' || g, 'purchase', 1, 'confirmed', 3,
       jsonb_build_object('intensive_id', 'js', 'student_id', 'hist-' || g,
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
SELECT 'hist-job-' || s.id || '-' || k.kind, 'purchase', k.kind, md5(s.id), s.id, 'done', 1,
       s.created_at, s.created_at + interval '1 second'
FROM sagas s
CROSS JOIN (VALUES ('purchase.request_payment'), ('purchase.grant_access')) AS k (kind)
WHERE s.id LIKE 'hist-%';

-- name: analyze
ANALYZE;
