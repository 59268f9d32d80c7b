-- Sagas: creation, compare-and-set transitions, audit, accepted operation ids.
-- PostgreSQL; sql/sqlite/queries/sagas.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.

-- name: insert_saga
-- Create a saga in its initial state, with its first deadline if any; one
-- reading of the clock stamps it, so the deadline is exactly creation + timeout.
WITH clock AS (SELECT clock_timestamp() AS now)
INSERT INTO sagas (id, kind, definition_version, state, data, deadline_event, deadline_at,
                   created_at, entered_at, updated_at)
SELECT :id, :kind, :definition_version, :state, CAST(:data AS jsonb), :deadline_event,
       CASE WHEN CAST(:deadline_seconds AS double precision) IS NULL THEN NULL
            ELSE clock.now + make_interval(secs => CAST(:deadline_seconds AS double precision))
       END,
       clock.now, clock.now, clock.now
FROM clock
RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
          created_at, entered_at, updated_at;

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
-- version the decision was made on; set its next deadline from the database clock.
WITH clock AS (SELECT clock_timestamp() AS now)
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
    updated_at = clock.now
FROM clock
WHERE id = :id AND state = :from_state AND version = :version
RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
          created_at, entered_at, updated_at;

-- name: insert_transition
-- Append one audit row.  Inside a job's fenced transaction it names the job
-- and records whether that job's lease was valid at this moment (the fencing
-- witness `saga verify` reads); outside one both stay NULL.
INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, cause, payload,
                              job_id, lease_valid)
VALUES (:saga_id, :version, :from_state, :to_state, :event, :actor, :cause, CAST(:payload AS jsonb),
        CAST(:job_id AS text),
        CASE WHEN CAST(:job_id AS text) IS NULL THEN NULL
             ELSE EXISTS (SELECT 1 FROM jobs
                          WHERE id = :job_id AND state = 'running' AND lease_token = :lease_token
                            AND lease_until > clock_timestamp())
        END);

-- name: list_transitions
-- A saga's audit trail, oldest first.
SELECT version, from_state, to_state, event, actor, cause, payload, at
FROM saga_transitions WHERE saga_id = :saga_id
ORDER BY version;

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

-- name: operation_of_saga
-- The operation id that created a saga.
SELECT operation_id FROM saga_operations WHERE saga_id = :saga_id;
