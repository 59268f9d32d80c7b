-- Facts for `saga verify`: each invariant of DESIGN.md §2, read straight from the tables.
-- SQLite; sql/engine/postgres/queries/verify.sql defines the same names.

-- name: verify_sagas_without_operation
-- Sagas whose accepting operation id is missing.
SELECT s.id FROM sagas s LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE o.saga_id IS NULL;

-- name: verify_transitions
-- The whole audit trail, per saga in version order, each row with the
-- definition it was made under (NULL: written before 0016 recorded it, by a
-- release that could not migrate sagas: the saga's own) and, for a
-- migration's row, what it re-derived.
SELECT t.saga_id, t.version, t.from_state, t.to_state, t.event, t.job_id, t.lease_valid, t.at,
       json_extract(t.payload, '$.event_id') AS event_id, s.kind,
       coalesce(t.definition_version, s.definition_version) AS definition_version,
       CASE WHEN t.event = :migrated THEN json_extract(t.payload, '$.queued') END AS queued
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

-- name: verify_outbox_events
-- The id of every event in the outbox, published or not.
SELECT event_id FROM outbox;

-- name: get_prune_horizon
-- How far retention pruned rows of :target (NULL: never).
SELECT horizon FROM prune_horizons WHERE target = :target;

-- name: verify_stat_counts
-- Kept counts beside a count of the rows.
WITH actual AS (
    SELECT 'sagas' AS metric, kind AS key1, state AS key2, count(*) AS n,
           sum(CAST(round((julianday(entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
               AS total
    FROM sagas GROUP BY kind, state
    UNION ALL
    SELECT 'archived', queue, '', count(*), 0 FROM job_archive GROUP BY queue
    UNION ALL
    SELECT 'outbox', '', '', count(published_at), coalesce(sum(errors), 0) FROM outbox
), compared AS (
    SELECT k.metric, k.key1, k.key2, k.n AS kept, coalesce(a.n, 0) AS actual,
           k.total AS kept_total, coalesce(a.total, 0) AS actual_total
    FROM stat_counts k LEFT JOIN actual a USING (metric, key1, key2)
    UNION ALL
    SELECT a.metric, a.key1, a.key2, 0, a.n, 0, a.total
    FROM actual a
    WHERE NOT EXISTS (SELECT 1 FROM stat_counts k WHERE k.metric = a.metric
                      AND k.key1 = a.key1 AND k.key2 = a.key2)
)
SELECT metric, key1, key2, kept, actual, kept_total, actual_total
FROM compared
ORDER BY metric, key1, key2;
