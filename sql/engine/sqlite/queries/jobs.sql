-- Jobs: acceptance, claims, fenced writes, dead letters, statistics.
-- SQLite; sql/engine/postgres/queries/jobs.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.  Lists of ids or
-- of (id, token, result) items arrive as one bound JSON document.
-- Write transactions start with BEGIN IMMEDIATE: they hold the write lock from
-- their first statement, so claims need no SKIP LOCKED and fences no FOR UPDATE.

-- name: enqueue_jobs
-- statements: 2
-- Queue jobs, each due at its available_at or after its delay, with their
-- payloads beside them; ids that exist already are left alone (and keep the
-- payload they have).  The ids that were inserted come back.
INSERT INTO jobs (id, queue, kind, digest, saga_id, max_attempts, available_at)
SELECT json_extract(i.value, '$.id'), json_extract(i.value, '$.queue'),
       json_extract(i.value, '$.kind'), json_extract(i.value, '$.digest'),
       json_extract(i.value, '$.saga_id'), json_extract(i.value, '$.max_attempts'),
       coalesce(
           strftime('%Y-%m-%dT%H:%M:%fZ', json_extract(i.value, '$.available_at')),
           strftime('%Y-%m-%dT%H:%M:%fZ',
                    julianday('now') + json_extract(i.value, '$.delay_seconds') / 86400.0)
       )
FROM json_each(:items) AS i
WHERE true
ORDER BY json_extract(i.value, '$.id')
ON CONFLICT (id) DO NOTHING
RETURNING id;
INSERT INTO job_payloads (job_id, payload)
SELECT json_extract(i.value, '$.id'), json(json_extract(i.value, '$.payload'))
FROM json_each(:items) AS i
WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.id = json_extract(i.value, '$.id'))
ON CONFLICT (job_id) DO NOTHING;

-- name: notify_jobs
-- Nothing to do: SQLite has no LISTEN/NOTIFY, workers poll.
SELECT :queue;

-- name: drop_pending_job
-- Forget one job that has not started (what it was for no longer matters).
DELETE FROM jobs WHERE id = :id AND state = 'pending';

-- name: job_digests
-- The fingerprints of accepted jobs, live or finished.
SELECT id, kind, digest, state FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))
UNION ALL
SELECT id, kind, digest, state FROM job_archive WHERE id IN (SELECT value FROM json_each(:ids));

-- name: archived_digests
-- The fingerprints of jobs that finished before, among these ids.
SELECT id, kind, digest, state FROM job_archive WHERE id IN (SELECT value FROM json_each(:ids));

-- name: forget_new_jobs
-- Undo this transaction's own inserts of jobs whose ids already finished.
DELETE FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending' AND attempts = 0;

-- name: get_job
-- One job, live or finished, with its payload while it is live.
SELECT j.id, j.queue, j.kind, j.saga_id, j.state, j.attempts, j.max_attempts, j.available_at,
       j.lease_until, j.last_error, j.error_class, j.created_at, j.finished_at, p.payload
FROM jobs j LEFT JOIN job_payloads p ON p.job_id = j.id
WHERE j.id = :id
UNION ALL
SELECT a.id, a.queue, a.kind, a.saga_id, a.state, a.attempts, a.attempts, NULL, NULL, NULL, NULL,
       a.created_at, a.finished_at, NULL
FROM job_archive a
WHERE a.id = :id;

-- name: get_job_result
-- The result a completed job stored.
SELECT result FROM job_results WHERE job_id = :job_id;

-- name: dead_letter_exhausted_leases
-- Jobs whose lease ran out on their last allowed attempt: the worker died or
-- hung every time (a poison job).  They become dead letters, not new attempts.
UPDATE jobs
SET state = 'failed', lease_token = NULL, lease_until = NULL,
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), error_class = 'crashed',
    last_error = 'lease expired on the last attempt: the worker stopped without reporting '
                 || attempts || ' time(s)'
WHERE id IN (
    SELECT id FROM jobs
    WHERE state = 'running' AND lease_until < strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
      AND attempts >= max_attempts
      AND kind IN (SELECT value FROM json_each(:kinds))
    ORDER BY lease_until
    LIMIT :limit
)
RETURNING id, kind, attempts;

-- name: claim_expired_jobs
-- Take over jobs whose worker lost its lease (crashed, was killed, hung).
-- With :first_time, only those whose lease expired for the first time, up to
-- :batch at once: a killed worker's batch comes back together.  Each is
-- marked 'lease_expired'; one that expires again (it may be the job that
-- kills its worker) is then taken alone (:first_time false, :batch 1).
UPDATE jobs
SET attempts = attempts + 1, lease_token = :token,
    lease_until = strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + :lease_seconds / 86400.0),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), error_class = 'lease_expired',
    last_error = 'lease expired: the worker that held it stopped without reporting'
WHERE id IN (
    SELECT id FROM jobs
    WHERE state = 'running' AND lease_until < strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
      AND attempts < max_attempts
      AND (NOT :first_time OR error_class IS NOT 'lease_expired')
      AND kind IN (SELECT value FROM json_each(:kinds))
    ORDER BY lease_until, id
    LIMIT :batch
)
RETURNING id, queue, kind, saga_id, attempts, max_attempts, lease_until,
          (SELECT p.payload FROM job_payloads p WHERE p.job_id = jobs.id) AS payload;

-- name: claim_jobs
-- Claim up to :batch due jobs in one short transaction; each gets a lease
-- from the database clock under a fresh token.
UPDATE jobs
SET state = 'running', attempts = attempts + 1, lease_token = :token,
    lease_until = strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + :lease_seconds / 86400.0),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id IN (
    SELECT id FROM jobs
    WHERE state = 'pending' AND available_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
      AND kind IN (SELECT value FROM json_each(:kinds))
    ORDER BY available_at, id
    LIMIT :batch
)
RETURNING id, queue, kind, saga_id, attempts, max_attempts, lease_until,
          (SELECT p.payload FROM job_payloads p WHERE p.job_id = jobs.id) AS payload;

-- name: fence_jobs
-- The listed jobs this worker still owns: matching token, unexpired lease.
-- Only these may be completed.
SELECT j.id FROM jobs j
JOIN json_each(:items) AS i ON json_extract(i.value, '$.id') = j.id
WHERE j.state = 'running' AND j.lease_token = json_extract(i.value, '$.token')
  AND j.lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
ORDER BY j.id;

-- name: archive_owned_jobs
-- statements: 3
-- Fence and complete: the listed jobs this worker still owns (token matches,
-- lease unexpired) move to the archive as done, with their results (one per
-- job), and leave the hot table (their payloads go with them).  The ids it
-- archived come back; the others are not ours.  A job both archived and still
-- in the hot table is one this query just archived: an archived id is never
-- queued again.
INSERT INTO job_archive (id, queue, kind, digest, saga_id, state, attempts, created_at, finished_at)
SELECT j.id, j.queue, j.kind, j.digest, j.saga_id, 'done', j.attempts, j.created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM jobs j
JOIN json_each(:items) AS i ON json_extract(i.value, '$.id') = j.id
WHERE j.state = 'running' AND j.lease_token = json_extract(i.value, '$.token')
  AND j.lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
ORDER BY j.id
RETURNING id;
INSERT INTO job_results (job_id, result)
SELECT json_extract(i.value, '$.id'), json(json_extract(i.value, '$.result'))
FROM json_each(:items) AS i
WHERE json_type(i.value, '$.result') NOT IN ('null')
  AND json_type(i.value, '$.result') IS NOT NULL
  AND EXISTS (SELECT 1 FROM job_archive a WHERE a.id = json_extract(i.value, '$.id'))
  AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = json_extract(i.value, '$.id'));
DELETE FROM jobs
WHERE id IN (SELECT json_extract(value, '$.id') FROM json_each(:items))
  AND EXISTS (SELECT 1 FROM job_archive a WHERE a.id = jobs.id);

-- name: retry_job
-- Fenced: give the job back for a later attempt, keeping the error.
UPDATE jobs
SET state = 'pending', lease_token = NULL, lease_until = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    available_at = strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + :delay_seconds / 86400.0),
    last_error = :error, error_class = :error_class
WHERE id = :id AND state = 'running' AND lease_token = :token
  AND lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
RETURNING id, available_at;

-- name: fail_job
-- Fenced: dead-letter the job with its reason.
UPDATE jobs
SET state = 'failed', lease_token = NULL, lease_until = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), last_error = :error,
    error_class = :error_class
WHERE id = :id AND state = 'running' AND lease_token = :token
  AND lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
RETURNING id;

-- name: extend_leases
-- Fenced: push the leases of the listed jobs of one claim further.
UPDATE jobs
SET lease_until = strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + :lease_seconds / 86400.0),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state = 'running' AND lease_token = :token
  AND lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
RETURNING id;

-- name: release_jobs
-- Fenced: hand claimed jobs that never started back, as if never claimed.
UPDATE jobs
SET state = 'pending', lease_token = NULL, lease_until = NULL, attempts = attempts - 1,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state = 'running' AND lease_token = :token
  AND lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
RETURNING id;

-- name: next_due_in
-- Seconds until the next pending job of these kinds is due (NULL: none).
SELECT max(0, (julianday(min(available_at)) - julianday('now')) * 86400.0)
FROM jobs
WHERE state = 'pending' AND kind IN (SELECT value FROM json_each(:kinds));

-- name: list_dead_letters
-- Dead letters, oldest first, optionally of one queue and one kind (the
-- columns of get_job, without the payload).
SELECT j.id, j.queue, j.kind, j.saga_id, j.state, j.attempts, j.max_attempts, j.available_at,
       j.lease_until, j.last_error, j.error_class, j.created_at, j.finished_at, NULL AS payload
FROM jobs j
WHERE j.state = 'failed'
  AND (:queue IS NULL OR j.queue = :queue)
  AND (:kind IS NULL OR j.kind = :kind)
  AND (:job_id IS NULL OR j.id = :job_id)
ORDER BY j.finished_at, j.id
LIMIT :limit;

-- name: replay_job
-- Give one dead letter a fresh set of attempts, due now.
UPDATE jobs
SET state = 'pending', attempts = 0, available_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    finished_at = NULL, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id = :id AND state = 'failed'
RETURNING id, queue;

-- name: record_replay
-- Audit one replay.
INSERT INTO job_replays (job_id, actor, reason, previous_error, previous_class, attempts)
VALUES (:job_id, :actor, :reason, :previous_error, :previous_class, :attempts);

-- name: queue_stats
-- Per queue: pending (and due), running, expired leases, dead letters, oldest due age.
SELECT queue,
       count(*) FILTER (WHERE state = 'pending') AS pending,
       count(*) FILTER (WHERE state = 'pending'
                        AND available_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) AS due,
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE state = 'running'
                        AND lease_until < strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) AS expired_leases,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       coalesce((julianday('now') - julianday(min(available_at) FILTER (
           WHERE state = 'pending' AND available_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
       ))) * 86400.0, 0) AS oldest_pending_age_s
FROM jobs
GROUP BY queue
ORDER BY queue;

-- name: failed_by_reason
-- Dead letters per queue and error class.
SELECT queue, error_class, count(*) AS failed
FROM jobs WHERE state = 'failed'
GROUP BY queue, error_class
ORDER BY queue, error_class;

-- name: done_by_queue
-- Finished jobs per queue (the archive's rows), from the kept counts.
SELECT key1 AS queue, n AS done
FROM stat_counts WHERE metric = 'archived' AND n > 0
ORDER BY key1;

-- name: saga_state_stats
-- Per saga kind and state: how many (kept counts), how long they have been
-- there on average (from the kept sum of entry times, in ms) and the
-- oldest's time (one index probe per state).
SELECT kind, state, sagas,
       (julianday('now')
        - julianday((SELECT min(s.entered_at) FROM sagas s
                     WHERE s.kind = kept.kind AND s.state = kept.state))) * 86400.0
           AS oldest_in_state_s,
       (julianday('now') - 2440587.5) * 86400.0 - entered_ms / 1000.0 / sagas AS mean_in_state_s
FROM (SELECT key1 AS kind, key2 AS state, n AS sagas, total AS entered_ms
      FROM stat_counts WHERE metric = 'sagas' AND n > 0) AS kept
ORDER BY kind, state;

-- name: roll_up_stat_deltas
-- Nothing to fold: SQLite's triggers add to the totals directly (one writer
-- at a time), so workers do not run this; it exists so that both dialects
-- answer to the same names.
DELETE FROM stat_counts WHERE 0;

-- name: activity_last_hour
-- Per minute of the last hour: jobs finished, and jobs waiting or running at
-- its end (live jobs created before it, plus archived ones finished after it).
WITH RECURSIVE minutes(m) AS (
    SELECT strftime('%Y-%m-%dT%H:%M:00.000Z', 'now', '-59 minutes')
    UNION ALL
    SELECT strftime('%Y-%m-%dT%H:%M:00.000Z', m, '+1 minute') FROM minutes
    WHERE m < strftime('%Y-%m-%dT%H:%M:00.000Z', 'now')
),
bounds AS (SELECT m, strftime('%Y-%m-%dT%H:%M:00.000Z', m, '+1 minute') AS e FROM minutes)
SELECT m AS minute,
       (SELECT count(*) FROM job_archive a WHERE a.finished_at >= m AND a.finished_at < e)
           AS finished,
       (SELECT count(*) FROM jobs j WHERE j.state <> 'failed' AND j.created_at < e)
     + (SELECT count(*) FROM job_archive a WHERE a.finished_at >= e AND a.created_at < e)
           AS backlog
FROM bounds ORDER BY m;
