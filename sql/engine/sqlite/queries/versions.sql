-- Definition versions and migration plans: live sagas per version, moving
-- them to another version in batches (saga/core/sagas/migrations.py).
-- SQLite; sql/engine/postgres/queries/versions.sql defines the same names, and
-- values are always bound (:name), never formatted into the text.  Write
-- transactions hold the write lock from their first statement: no FOR UPDATE.

-- name: mark_finished_sagas
-- Mark the sagas of one definition that sit in one of its terminal states
-- (rows from before migration 0016, or moved by a release that did not mark
-- them); the partial index of unfinished sagas makes a repeat cost nothing.
UPDATE sagas SET finished_at = updated_at
WHERE finished_at IS NULL AND kind = :kind AND definition_version = :definition_version
  AND state IN (SELECT value FROM json_each(:states));

-- name: live_sagas_by_version
-- Live sagas (not known to be finished) per kind, definition version and
-- state, of one kind if given: read from the partial index sagas_live.
SELECT kind, definition_version, state, count(*) AS n
FROM sagas
WHERE finished_at IS NULL AND (:kind IS NULL OR kind = :kind)
GROUP BY kind, definition_version, state
ORDER BY kind, definition_version, state;

-- name: migration_candidates
-- One batch of live sagas still on a definition version, in id order after
-- :after (where the previous batch of the pass ended).
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas
WHERE kind = :kind AND definition_version = :definition_version AND finished_at IS NULL
  AND id > :after
ORDER BY id
LIMIT :limit;

-- name: lock_step_jobs_of_sagas
-- The step jobs and timers of these sagas that have not finished (pending or running).
SELECT j.id, j.saga_id, j.kind, j.state
FROM jobs j
WHERE j.saga_id IN (SELECT value FROM json_each(:ids))
  AND j.state IN ('pending', 'running')
  AND (j.kind = :timer_kind
       OR substr(j.id, 1, length('step:' || j.saga_id || ':')) = 'step:' || j.saga_id || ':')
ORDER BY j.id;

-- name: migrate_saga
-- statements: 2
-- Compare-and-set on (id, definition version, version): move the saga to
-- another definition and the state the plan maps, with its deadline from the
-- new definition (counted from when it entered the state it was in, or from
-- its creation: a migration does not restart its clocks).  Then, only if it
-- moved (changes()): its audit row, under the new definition.
UPDATE sagas
SET definition_version = :to_version,
    state = :to_state,
    version = version + 1,
    deadline_event = :deadline_event,
    deadline_at = CASE
        WHEN :deadline_seconds IS NULL THEN NULL
        WHEN :deadline_since_created
            THEN strftime('%Y-%m-%dT%H:%M:%fZ', julianday(created_at) + :deadline_seconds / 86400.0)
        ELSE strftime('%Y-%m-%dT%H:%M:%fZ', julianday(entered_at) + :deadline_seconds / 86400.0)
    END,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    finished_at = CASE WHEN :finished THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') END
WHERE id = :id AND definition_version = :from_version AND version = :version
RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
          created_at, entered_at, updated_at;
INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, cause, payload,
                              definition_version)
SELECT id, version, :from_state, state, :event, :actor, :cause, :payload, definition_version
FROM sagas WHERE id = :id AND changes() = 1;

-- name: supersede_jobs
-- statements: 3
-- The listed jobs, if still pending or running, leave the hot table for the
-- archive with :result (what superseded them): a worker holding one finds
-- nothing to complete, extend or fail (its lease is gone with the row).
INSERT INTO job_archive (id, queue, kind, digest, saga_id, state, attempts, created_at, finished_at)
SELECT j.id, j.queue, j.kind, j.digest, j.saga_id, 'done', j.attempts, j.created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM jobs j
WHERE j.id IN (SELECT value FROM json_each(:ids)) AND j.state IN ('pending', 'running')
ORDER BY j.id
RETURNING id;
INSERT INTO job_results (job_id, result)
SELECT j.id, json(:result) FROM jobs j
WHERE j.id IN (SELECT value FROM json_each(:ids)) AND j.state IN ('pending', 'running');
DELETE FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('pending', 'running');
