-- Sagas: creation, compare-and-set transitions, audit, accepted operation ids.
-- SQLite; sql/engine/postgres/queries/sagas.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.
-- Write transactions start with BEGIN IMMEDIATE: they hold the write lock from
-- their first statement, so no FOR UPDATE is needed.

-- name: insert_saga
-- statements: 2
-- Create a saga in its initial state, with its first deadline if any; then
-- its first audit row (the "start" event, at the same instant).
INSERT INTO sagas (id, kind, definition_version, state, data, deadline_event, deadline_at)
VALUES (
    :id, :kind, :definition_version, :state, :data, :deadline_event,
    CASE WHEN :deadline_seconds IS NULL THEN NULL
         ELSE strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + :deadline_seconds / 86400.0)
    END
)
RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
          created_at, entered_at, updated_at;
INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, cause, payload,
                              at, job_id, lease_valid, definition_version)
SELECT id, version, NULL, state, 'start', :actor, :cause, json_object(), created_at, :job_id,
       CASE WHEN :job_id IS NULL THEN NULL
            ELSE EXISTS (SELECT 1 FROM jobs
                         WHERE id = :job_id AND state = 'running' AND lease_token = :lease_token
                           AND lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
       END,
       definition_version
FROM sagas WHERE id = :id;

-- name: get_saga
-- One saga.
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas WHERE id = :id;

-- name: lock_saga
-- One saga, to decide its next transition (the write lock is already held).
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas WHERE id = :id;

-- name: transition_saga
-- statements: 3
-- Compare-and-set: move the saga only if it is still in the state and at the
-- version the decision was made on; set its next deadline from the database
-- clock.  Then, only if it moved (changes()): its audit row (naming the job
-- whose fenced transaction this is, and whether that job's lease was valid at
-- this moment: the fencing witness `saga verify` reads; both NULL outside a
-- job) and forgetting its timers that have not fired.  :finished says the
-- target state is terminal (finished_at, what retiring a version reads).
UPDATE sagas
SET state = :to_state,
    version = version + 1,
    data = :data,
    deadline_event = :deadline_event,
    deadline_at = CASE
        WHEN :deadline_seconds IS NULL THEN NULL
        WHEN :deadline_since_created
            THEN strftime('%Y-%m-%dT%H:%M:%fZ', julianday(created_at) + :deadline_seconds / 86400.0)
        ELSE strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + :deadline_seconds / 86400.0)
    END,
    entered_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    finished_at = CASE WHEN :finished THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') END
WHERE id = :id AND state = :from_state AND version = :version
RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
          created_at, entered_at, updated_at;
INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, cause, payload,
                              job_id, lease_valid, definition_version)
SELECT id, version, :from_state, state, :event, :actor, :cause, :payload, :job_id,
       CASE WHEN :job_id IS NULL THEN NULL
            ELSE EXISTS (SELECT 1 FROM jobs
                         WHERE id = :job_id AND state = 'running' AND lease_token = :lease_token
                           AND lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
       END,
       definition_version
FROM sagas WHERE id = :id AND changes() = 1;
DELETE FROM jobs
WHERE saga_id = :id AND kind = :timer_kind AND state = 'pending' AND changes() = 1;

-- name: list_transitions
-- A saga's audit trail, oldest first, each row with the definition it was made under.
SELECT t.version, t.from_state, t.to_state, t.event, t.actor, t.cause, t.payload, t.at,
       coalesce(t.definition_version, s.definition_version) AS definition_version
FROM saga_transitions t JOIN sagas s ON s.id = t.saga_id
WHERE t.saga_id = :saga_id
ORDER BY t.version;

-- name: claim_operation
-- Claim an operation id; no row back means it was claimed before.
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
WHERE (:kind IS NULL OR kind = :kind) AND (:state IS NULL OR state = :state)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: sagas_without_work
-- Sagas with no job pending or running and no open outcome item (the caller
-- keeps those whose state is not terminal: they wait for nothing).
SELECT s.id, s.kind, s.definition_version, s.state, s.version, s.data, s.deadline_at,
       s.deadline_event, s.created_at, s.entered_at, s.updated_at
FROM sagas s
WHERE (:kind IS NULL OR s.kind = :kind)
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
VALUES (:saga_id, :event, :origin, :actor, :cause, :why, :payload);

-- name: event_refusals_of_saga
-- The events refused for one saga, oldest first.
SELECT event, origin, actor, cause, why, at FROM event_refusals
WHERE saga_id = :saga_id ORDER BY id;

-- name: page_of_sagas
-- One page of the console's saga list, newest first (the order of sagas_newest).
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas
WHERE (:kind IS NULL OR kind = :kind) AND (:state IS NULL OR state = :state)
ORDER BY created_at DESC, id DESC
LIMIT :limit OFFSET :offset;

-- name: count_sagas
-- How many sagas, of one kind and one state if given, from the kept counts
-- (stat_counts, written with every saga): no scan of the history.
SELECT coalesce(sum(n), 0) FROM stat_counts
WHERE metric = 'sagas' AND (:kind IS NULL OR key1 = :kind) AND (:state IS NULL OR key2 = :state);
