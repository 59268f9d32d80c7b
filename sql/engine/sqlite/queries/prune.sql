-- Retention: finished operational rows past a window, deleted in small batches.
-- SQLite; sql/engine/postgres/queries/prune.sql defines the same names.  Each
-- batch is its own short write transaction.

-- name: prune_cutoff
-- The cut-off: the database clock minus the window.
SELECT strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') - :seconds / 86400.0) AS cutoff;

-- name: advance_prune_horizon
-- Record that rows of :target before :cutoff may be gone (verify stops asking for them).
INSERT INTO prune_horizons (target, horizon)
VALUES (:target, :cutoff)
ON CONFLICT (target) DO UPDATE SET horizon = max(prune_horizons.horizon, excluded.horizon);

-- name: count_prunable_jobs
-- Jobs archived as done before the cut-off.
SELECT count(*) FROM job_archive WHERE state = 'done' AND finished_at < :cutoff;

-- name: prune_jobs
-- One batch of them (their results go in prune_job_results, same transaction).
DELETE FROM job_archive
WHERE id IN (SELECT id FROM job_archive
             WHERE state = 'done' AND finished_at < :cutoff
             ORDER BY finished_at LIMIT :batch)
RETURNING id;

-- name: prune_job_results
-- The results of the jobs just pruned.
DELETE FROM job_results WHERE job_id IN (SELECT value FROM json_each(:ids));

-- name: count_prunable_inbox
-- Inbox messages settled before the cut-off (applied, absorbed or not
-- applicable), except those with a recorded conflict: that is evidence.
SELECT count(*) FROM inbox_messages m
WHERE m.outcome <> 'unmatched' AND m.received_at < :cutoff
  AND NOT EXISTS (SELECT 1 FROM inbox_message_conflicts c
                  WHERE c.source = m.source AND c.event_id = m.event_id);

-- name: prune_inbox
-- One batch of them.
DELETE FROM inbox_messages
WHERE (source, event_id) IN (
    SELECT m.source, m.event_id FROM inbox_messages m
    WHERE m.outcome <> 'unmatched' AND m.received_at < :cutoff
      AND NOT EXISTS (SELECT 1 FROM inbox_message_conflicts c
                      WHERE c.source = m.source AND c.event_id = m.event_id)
    ORDER BY m.received_at LIMIT :batch
)
RETURNING event_id AS id;

-- name: count_prunable_outbox
-- Outbox events published before the cut-off.
SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND published_at < :cutoff;

-- name: prune_outbox
-- One batch of them; an unpublished event is never deleted.
DELETE FROM outbox
WHERE id IN (SELECT id FROM outbox
             WHERE published_at IS NOT NULL AND published_at < :cutoff
             ORDER BY published_at LIMIT :batch)
  AND published_at IS NOT NULL
RETURNING id;

-- name: count_prunable_refusals
-- Requests refused at the inbox's door before the cut-off.
SELECT count(*) FROM inbox_refusals WHERE received_at < :cutoff;

-- name: prune_refusals
-- statements: 2
-- One batch of them; and the hourly counts last added to before the cut-off.
DELETE FROM inbox_refusals
WHERE id IN (SELECT id FROM inbox_refusals WHERE received_at < :cutoff
             ORDER BY received_at LIMIT :batch)
RETURNING id;
DELETE FROM inbox_refusal_counts WHERE last_at < :cutoff;

-- name: count_prunable_sign_ins
-- Console sign-in attempts last seen before the cut-off and outside the
-- throttle's window (a short --older-than never lifts a throttle).
SELECT count(*) FROM sign_in_attempts
WHERE last_at < :cutoff
  AND last_at < strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') - :window_seconds / 86400.0);

-- name: prune_sign_ins
-- One batch of them.
DELETE FROM sign_in_attempts
WHERE id IN (SELECT id FROM sign_in_attempts
             WHERE last_at < :cutoff
               AND last_at < strftime('%Y-%m-%dT%H:%M:%fZ',
                                      julianday('now') - :window_seconds / 86400.0)
             ORDER BY last_at LIMIT :batch)
RETURNING id;
