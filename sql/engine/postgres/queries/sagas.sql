-- Sagas: creation, compare-and-set transitions, audit, accepted operation ids.
-- PostgreSQL; sql/engine/sqlite/queries/sagas.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.

-- name: insert_saga
-- Create a saga in its initial state, with its first deadline if any; one
-- reading of the clock stamps it, so the deadline is exactly creation + timeout.
-- Its first audit row (the "start" event, at the same instant) in the same
-- statement.
WITH clock AS (SELECT clock_timestamp() AS now),
created AS (
    INSERT INTO sagas (id, kind, definition_version, state, data, deadline_event, deadline_at,
                       created_at, entered_at, updated_at)
    SELECT :id, :kind, :definition_version, :state, CAST(:data AS jsonb), :deadline_event,
           CASE WHEN CAST(:deadline_seconds AS double precision) IS NULL THEN NULL
                ELSE clock.now + make_interval(secs => CAST(:deadline_seconds AS double precision))
           END,
           clock.now, clock.now, clock.now
    FROM clock
    RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
              created_at, entered_at, updated_at
),
audit AS (
    INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, cause,
                                  payload, at, job_id, lease_valid, definition_version)
    SELECT created.id, created.version, NULL, created.state, 'start', CAST(:actor AS text),
           CAST(:cause AS text), jsonb_build_object(), created.created_at, CAST(:job_id AS text),
           CASE WHEN CAST(:job_id AS text) IS NULL THEN NULL
                ELSE EXISTS (SELECT 1 FROM jobs
                             WHERE id = :job_id AND state = 'running'
                               AND lease_token = :lease_token
                               AND lease_until > clock_timestamp())
           END,
           created.definition_version
    FROM created
)
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM created;

-- name: get_saga
-- One saga.
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas WHERE id = :id;

-- name: lock_saga
-- One saga, locked until the transaction ends, to decide its next transition.
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas WHERE id = :id
FOR UPDATE;

-- name: transition_saga
-- Compare-and-set: move the saga only if it is still in the state and at the
-- version the decision was made on; set its next deadline from the database
-- clock.  In the same statement, only if it moved: its audit row (naming the
-- job whose fenced transaction this is, and whether that job's lease was
-- valid at this moment: the fencing witness `saga verify` reads; both NULL
-- outside a job) and forgetting its timers that have not fired.  :finished
-- says the target state is terminal (finished_at, what retiring a version reads).
WITH clock AS (SELECT clock_timestamp() AS now),
moved AS (
    UPDATE sagas
    SET state = :to_state,
        version = version + 1,
        data = CAST(:data AS jsonb),
        deadline_event = :deadline_event,
        deadline_at = CASE
            WHEN CAST(:deadline_seconds AS double precision) IS NULL THEN NULL
            WHEN CAST(:deadline_since_created AS boolean)
                THEN created_at + make_interval(secs => CAST(:deadline_seconds AS double precision))
            ELSE clock.now + make_interval(secs => CAST(:deadline_seconds AS double precision))
        END,
        entered_at = clock.now,
        updated_at = clock.now,
        finished_at = CASE WHEN CAST(:finished AS boolean) THEN clock.now END
    FROM clock
    WHERE id = :id AND state = :from_state AND version = :version
    RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
              created_at, entered_at, updated_at
),
audit AS (
    INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, cause,
                                  payload, job_id, lease_valid, definition_version)
    SELECT moved.id, moved.version, CAST(:from_state AS text), moved.state,
           CAST(:event AS text), CAST(:actor AS text), CAST(:cause AS text),
           CAST(:payload AS jsonb), CAST(:job_id AS text),
           CASE WHEN CAST(:job_id AS text) IS NULL THEN NULL
                ELSE EXISTS (SELECT 1 FROM jobs
                             WHERE id = :job_id AND state = 'running'
                               AND lease_token = :lease_token
                               AND lease_until > clock_timestamp())
           END,
           moved.definition_version
    FROM moved
),
dropped AS (
    DELETE FROM jobs
    WHERE saga_id = :id AND kind = :timer_kind AND state = 'pending'
      AND EXISTS (SELECT 1 FROM moved)
)
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM moved;

-- name: list_transitions
-- A saga's audit trail, oldest first, each row with the definition it was made under.
SELECT t.version, t.from_state, t.to_state, t.event, t.actor, t.cause, t.payload, t.at,
       coalesce(t.definition_version, s.definition_version) AS definition_version
FROM saga_transitions t JOIN sagas s ON s.id = t.saga_id
WHERE t.saga_id = :saga_id
ORDER BY t.version;

-- name: claim_operation
-- Claim an operation id; no row back means it was claimed before (maybe just now,
-- by a concurrent transaction this one waited for).
INSERT INTO saga_operations (operation_id, kind, digest, saga_id)
VALUES (:operation_id, :kind, :digest, :saga_id)
ON CONFLICT (operation_id) DO NOTHING
RETURNING operation_id;

-- name: get_operation
-- An accepted operation id.
SELECT operation_id, kind, digest, saga_id, created_at
FROM saga_operations WHERE operation_id = :operation_id;

-- name: list_sagas
-- Sagas of any kind, newest first, optionally of one kind and one state.
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas
WHERE (CAST(:kind AS text) IS NULL OR kind = :kind) AND (CAST(:state AS text) IS NULL OR state = :state)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: sagas_without_work
-- Sagas with no job pending or running and no open outcome item (the caller
-- keeps those whose state is not terminal: they wait for nothing).
SELECT s.id, s.kind, s.definition_version, s.state, s.version, s.data, s.deadline_at,
       s.deadline_event, s.created_at, s.entered_at, s.updated_at
FROM sagas s
WHERE (CAST(:kind AS text) IS NULL OR s.kind = :kind)
  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.saga_id = s.id AND j.state IN ('pending', 'running'))
  AND NOT EXISTS (SELECT 1 FROM recon_items r
                  WHERE r.saga_id = s.id AND r.status = 'open' AND r.kind = 'outcome')
ORDER BY s.created_at DESC, s.id DESC
LIMIT :limit;

-- name: live_jobs_of_saga
-- A saga's jobs that are not finished: pending (steps, timers), running, dead letters.
SELECT j.id, j.queue, j.kind, j.saga_id, j.state, j.attempts, j.max_attempts, j.available_at,
       j.lease_until, j.last_error, j.error_class, j.created_at, j.finished_at,
       NULL AS payload
FROM jobs j WHERE j.saga_id = :saga_id
ORDER BY j.created_at, j.id;

-- name: open_items_of_saga
-- A saga's open reconciliation items.
SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts,
       max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution,
       resolved_by, resolution_reason, kind, overdue_at
FROM recon_items WHERE saga_id = :saga_id AND status = 'open'
ORDER BY opened_at;

-- name: insert_event_refusal
-- An event refused at its door (the machine's fired_by), kept for operators.
INSERT INTO event_refusals (saga_id, event, origin, actor, cause, why, payload)
VALUES (:saga_id, :event, :origin, :actor, :cause, :why, CAST(:payload AS jsonb));

-- name: event_refusals_of_saga
-- The events refused for one saga, oldest first.
SELECT event, origin, actor, cause, why, at FROM event_refusals
WHERE saga_id = :saga_id ORDER BY id;

-- name: page_of_sagas
-- One page of the console's saga list, newest first (the order of sagas_newest).
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas
WHERE (CAST(:kind AS text) IS NULL OR kind = :kind) AND (CAST(:state AS text) IS NULL OR state = :state)
ORDER BY created_at DESC, id DESC
LIMIT :limit OFFSET :offset;

-- name: count_sagas
-- How many sagas, of one kind and one state if given, from the kept counts
-- (stat_counts and the deltas not yet folded in): no scan of the history.
SELECT coalesce(sum(n), 0) FROM (
    SELECT key1, key2, n FROM stat_counts WHERE metric = 'sagas'
    UNION ALL
    SELECT key1, key2, n FROM stat_deltas WHERE metric = 'sagas'
) AS kept
WHERE (CAST(:kind AS text) IS NULL OR key1 = :kind) AND (CAST(:state AS text) IS NULL OR key2 = :state);
