-- Facts for `saga verify`: each invariant of DESIGN.md §2, read straight from the tables.
-- PostgreSQL; sql/engine/sqlite/queries/verify.sql defines the same names.

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
       t.payload ->> 'event_id' AS event_id, s.kind,
       coalesce(t.definition_version, s.definition_version) AS definition_version,
       CASE WHEN t.event = :migrated THEN t.payload ->> 'queued' END AS queued
FROM saga_transitions t JOIN sagas s ON s.id = t.saga_id
ORDER BY t.saga_id, t.version;

-- name: verify_saga_versions
-- Each saga's state and version, and how far past its deadline it is (NULL: none).
SELECT id, kind, definition_version, state, version, deadline_event,
       EXTRACT(EPOCH FROM clock_timestamp() - deadline_at) AS past_deadline_s
FROM sagas ORDER BY id;

-- name: verify_known_jobs
-- Which of these job ids exist, live or finished.
SELECT id FROM jobs WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
UNION ALL
SELECT id FROM job_archive
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))));

-- name: verify_open_items
-- Open reconciliation items with their saga's state, and how late their
-- deadline and next check are (negative: not yet due).
SELECT r.id, r.saga_id, r.kind, r.owner, r.next_check_at, r.overdue_at, r.attempts, s.state,
       EXTRACT(EPOCH FROM clock_timestamp() - r.deadline) AS past_deadline_s,
       EXTRACT(EPOCH FROM clock_timestamp() - r.next_check_at) AS past_check_s
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
SELECT payload ->> 'event_id' AS event_id, count(*) AS effects
FROM saga_transitions
WHERE payload ->> 'event_id' IS NOT NULL
GROUP BY payload ->> 'event_id'
HAVING count(*) > 1;

-- name: verify_outbox_events
-- The id of every event in the outbox, published or not.
SELECT event_id FROM outbox;

-- name: get_prune_horizon
-- How far retention pruned rows of :target (NULL: never).
SELECT horizon FROM prune_horizons WHERE target = :target;

-- name: verify_stat_counts
-- Kept counts (totals plus deltas) beside a count of the rows.
WITH kept AS (
    SELECT metric, key1, key2, sum(n) AS n, sum(total) AS total
    FROM (SELECT metric, key1, key2, n, total FROM stat_counts
          UNION ALL
          SELECT metric, key1, key2, n, total FROM stat_deltas) AS c
    GROUP BY metric, key1, key2
), actual AS (
    SELECT 'sagas' AS metric, kind AS key1, state AS key2, count(*) AS n,
           sum(EXTRACT(EPOCH FROM entered_at)) AS total
    FROM sagas GROUP BY kind, state
    UNION ALL
    SELECT 'archived', queue, '', count(*), 0 FROM job_archive GROUP BY queue
    UNION ALL
    SELECT 'outbox', '', '', count(published_at), coalesce(sum(errors), 0) FROM outbox
), compared AS (
    SELECT metric, key1, key2, coalesce(kept.n, 0) AS kept, coalesce(actual.n, 0) AS actual,
           coalesce(kept.total, 0) AS kept_total, coalesce(actual.total, 0) AS actual_total
    FROM kept FULL JOIN actual USING (metric, key1, key2)
)
SELECT metric, key1, key2, kept, actual, kept_total, actual_total
FROM compared
ORDER BY metric, key1, key2;
