-- Retention: finished operational rows past a window, deleted in small batches.
-- PostgreSQL; sql/engine/sqlite/queries/prune.sql defines the same names.  Each
-- batch is its own short transaction and skips rows another transaction
-- holds, so pruning never waits on (or blocks) the work it cleans up after.

-- name: prune_cutoff
-- The cut-off: the database clock minus the window.
SELECT clock_timestamp() - make_interval(secs => CAST(:seconds AS double precision)) AS cutoff;

-- name: advance_prune_horizon
-- Record that rows of :target before :cutoff may be gone (verify stops asking for them).
INSERT INTO prune_horizons (target, horizon)
VALUES (:target, CAST(:cutoff AS timestamptz))
ON CONFLICT (target) DO UPDATE SET horizon = greatest(prune_horizons.horizon, excluded.horizon);

-- name: count_prunable_jobs
-- Jobs archived as done before the cut-off.
SELECT count(*) FROM job_archive
WHERE state = 'done' AND finished_at < CAST(:cutoff AS timestamptz);

-- name: prune_jobs
-- One batch of them (their results go in prune_job_results, same transaction).
WITH batch AS (
    SELECT id FROM job_archive
    WHERE state = 'done' AND finished_at < CAST(:cutoff AS timestamptz)
    ORDER BY finished_at
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM job_archive a USING batch WHERE a.id = batch.id
RETURNING a.id;

-- name: prune_job_results
-- The results of the jobs just pruned.
DELETE FROM job_results
WHERE job_id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))));

-- name: count_prunable_inbox
-- Inbox messages settled before the cut-off (applied, absorbed or not
-- applicable), except those with a recorded conflict: that is evidence.
SELECT count(*) FROM inbox_messages m
WHERE m.outcome <> 'unmatched' AND m.received_at < CAST(:cutoff AS timestamptz)
  AND NOT EXISTS (SELECT 1 FROM inbox_message_conflicts c
                  WHERE c.source = m.source AND c.event_id = m.event_id);

-- name: prune_inbox
-- One batch of them.
WITH batch AS (
    SELECT m.source, m.event_id FROM inbox_messages m
    WHERE m.outcome <> 'unmatched' AND m.received_at < CAST(:cutoff AS timestamptz)
      AND NOT EXISTS (SELECT 1 FROM inbox_message_conflicts c
                      WHERE c.source = m.source AND c.event_id = m.event_id)
    ORDER BY m.received_at
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM inbox_messages m USING batch
WHERE m.source = batch.source AND m.event_id = batch.event_id
RETURNING m.event_id AS id;

-- name: count_prunable_outbox
-- Outbox events published before the cut-off.
SELECT count(*) FROM outbox
WHERE published_at IS NOT NULL AND published_at < CAST(:cutoff AS timestamptz);

-- name: prune_outbox
-- One batch of them; an unpublished event is never deleted.
WITH batch AS (
    SELECT id FROM outbox
    WHERE published_at IS NOT NULL AND published_at < CAST(:cutoff AS timestamptz)
    ORDER BY published_at
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox o USING batch WHERE o.id = batch.id AND o.published_at IS NOT NULL
RETURNING o.id;

-- name: count_prunable_refusals
-- Requests refused at the inbox's door before the cut-off.
SELECT count(*) FROM inbox_refusals WHERE received_at < CAST(:cutoff AS timestamptz);

-- name: prune_refusals
-- One batch of them; and the hourly counts last added to before the cut-off.
WITH counts AS (
    DELETE FROM inbox_refusal_counts WHERE last_at < CAST(:cutoff AS timestamptz)
), batch AS (
    SELECT id FROM inbox_refusals WHERE received_at < CAST(:cutoff AS timestamptz)
    ORDER BY received_at LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM inbox_refusals r USING batch WHERE r.id = batch.id
RETURNING r.id;

-- name: count_prunable_sign_ins
-- Console sign-in attempts last seen before the cut-off and outside the
-- throttle's window (a short --older-than never lifts a throttle).
SELECT count(*) FROM sign_in_attempts
WHERE last_at < CAST(:cutoff AS timestamptz)
  AND last_at < clock_timestamp() - make_interval(secs => CAST(:window_seconds AS double precision));

-- name: prune_sign_ins
-- One batch of them.
WITH batch AS (
    SELECT id FROM sign_in_attempts
    WHERE last_at < CAST(:cutoff AS timestamptz)
      AND last_at < clock_timestamp()
                    - make_interval(secs => CAST(:window_seconds AS double precision))
    ORDER BY last_at LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM sign_in_attempts s USING batch WHERE s.id = batch.id
RETURNING s.id;
