-- Facts for `saga verify`: each invariant of DESIGN.md §2, read straight from the tables.
-- PostgreSQL; sql/sqlite/queries/verify.sql defines the same names.

-- name: verify_purchases
-- Every purchase: state, seat, where it came from, price, and how long it has been there.
SELECT s.id, s.state, s.version, p.seat, p.intensive_id, p.amount_minor, p.currency,
       s.data ->> '_previous_state' AS previous_state,
       CAST(s.data ->> 'hold_seconds' AS double precision) AS hold_seconds,
       EXTRACT(EPOCH FROM clock_timestamp() - s.entered_at) AS in_state_s
FROM purchases p JOIN sagas s ON s.id = p.saga_id
ORDER BY s.id;

-- name: verify_sagas_without_operation
-- Sagas whose accepting operation id is missing.
SELECT s.id FROM sagas s LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE o.saga_id IS NULL;

-- name: verify_transitions
-- The whole audit trail, per saga in version order.
SELECT saga_id, version, from_state, to_state FROM saga_transitions ORDER BY saga_id, version;

-- name: verify_saga_versions
-- Each saga's state and version.
SELECT id, kind, state, version, deadline_event FROM sagas ORDER BY id;

-- name: verify_known_jobs
-- Which of these job ids exist, live or finished.
SELECT id FROM jobs WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
UNION ALL
SELECT id FROM job_archive
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))));

-- name: verify_open_items
-- Open reconciliation items with their saga's state.
SELECT r.id, r.saga_id, r.owner, r.next_check_at, s.state
FROM recon_items r JOIN sagas s ON s.id = r.saga_id
WHERE r.status = 'open';

-- name: verify_orphan_results
-- Results of jobs that are not archived as done (a write outside a completion).
SELECT r.job_id FROM job_results r
LEFT JOIN job_archive a ON a.id = r.job_id AND a.state = 'done'
WHERE a.id IS NULL;

-- name: verify_inbox_conflicts
-- Event ids that arrived again with other content.
SELECT count(*) FROM inbox_conflicts;
