-- Definition versions and migration plans: live sagas per version, moving
-- them to another version in batches (saga/core/sagas/migrations.py).
-- PostgreSQL; sql/engine/sqlite/queries/versions.sql defines the same names, and
-- values are always bound (:name), never formatted into the text.

-- name: mark_finished_sagas
-- Mark the sagas of one definition that sit in one of its terminal states
-- (rows from before migration 0016, or moved by a release that did not mark
-- them); the partial index of unfinished sagas makes a repeat cost nothing.
UPDATE sagas SET finished_at = updated_at
WHERE finished_at IS NULL AND kind = :kind AND definition_version = :definition_version
  AND state = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:states AS jsonb))));

-- name: live_sagas_by_version
-- Live sagas (not known to be finished) per kind, definition version and
-- state, of one kind if given: read from the partial index sagas_live.
SELECT kind, definition_version, state, count(*) AS n
FROM sagas
WHERE finished_at IS NULL AND (CAST(:kind AS text) IS NULL OR kind = :kind)
GROUP BY kind, definition_version, state
ORDER BY kind, definition_version, state;

-- name: migration_candidates
-- One batch of live sagas still on a definition version, in id order after
-- :after (where the previous batch of the pass ended), locked for this
-- transaction; sagas another transaction holds (a worker moving one) are
-- skipped, and met again by a later batch.
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas
WHERE kind = :kind AND definition_version = :definition_version AND finished_at IS NULL
  AND id > :after
ORDER BY id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: lock_step_jobs_of_sagas
-- The step jobs and timers of these sagas that have not finished (pending or
-- running), locked: a claim or a completion racing the migration either
-- happened before (and is seen) or waits for it (and finds nothing).
SELECT j.id, j.saga_id, j.kind, j.state
FROM jobs j
WHERE j.saga_id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
  AND j.state IN ('pending', 'running')
  AND (j.kind = :timer_kind OR starts_with(j.id, 'step:' || j.saga_id || ':'))
ORDER BY j.id
FOR UPDATE OF j;

-- name: migrate_saga
-- Compare-and-set on (id, definition version, version): move the saga to
-- another definition and the state the plan maps, with its deadline from the
-- new definition (counted from when it entered the state it was in, or from
-- its creation: a migration does not restart its clocks).  In the same
-- statement, only if it moved: its audit row, under the new definition.
WITH clock AS (SELECT clock_timestamp() AS now),
moved AS (
    UPDATE sagas
    SET definition_version = :to_version,
        state = :to_state,
        version = version + 1,
        deadline_event = :deadline_event,
        deadline_at = CASE
            WHEN CAST(:deadline_seconds AS double precision) IS NULL THEN NULL
            WHEN CAST(:deadline_since_created AS boolean)
                THEN created_at + make_interval(secs => CAST(:deadline_seconds AS double precision))
            ELSE entered_at + make_interval(secs => CAST(:deadline_seconds AS double precision))
        END,
        updated_at = clock.now,
        finished_at = CASE WHEN CAST(:finished AS boolean) THEN clock.now END
    FROM clock
    WHERE id = :id AND definition_version = :from_version AND version = :version
    RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
              created_at, entered_at, updated_at
),
audit AS (
    INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, cause,
                                  payload, definition_version)
    SELECT moved.id, moved.version, CAST(:from_state AS text), moved.state, CAST(:event AS text),
           CAST(:actor AS text), CAST(:cause AS text), CAST(:payload AS jsonb),
           moved.definition_version
    FROM moved
)
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM moved;

-- name: supersede_jobs
-- The listed jobs, if still pending or running, leave the hot table for the
-- archive with :result (what superseded them): a worker holding one finds
-- nothing to complete, extend or fail (its lease is gone with the row).
WITH gone AS (
    SELECT j.id, j.queue, j.kind, j.digest, j.saga_id, j.attempts, j.created_at
    FROM jobs j
    WHERE j.id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
      AND j.state IN ('pending', 'running')
    ORDER BY j.id
    FOR UPDATE OF j
),
archived AS (
    INSERT INTO job_archive (id, queue, kind, digest, saga_id, state, attempts, created_at,
                             finished_at)
    SELECT id, queue, kind, digest, saga_id, 'done', attempts, created_at, clock_timestamp()
    FROM gone
    RETURNING id
),
results AS (
    INSERT INTO job_results (job_id, result)
    SELECT id, CAST(:result AS jsonb) FROM gone
),
deleted AS (
    DELETE FROM jobs WHERE id IN (SELECT id FROM gone)
)
SELECT id FROM archived;
