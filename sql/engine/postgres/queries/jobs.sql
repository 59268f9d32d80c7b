-- Jobs: acceptance, claims, fenced writes, dead letters, statistics.
-- PostgreSQL; sql/engine/sqlite/queries/jobs.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.  Lists of ids or
-- of (id, token, result) items arrive as one bound JSON document.

-- (= ANY (ARRAY(...)) rather than IN (SELECT ...): the planner then walks the
-- primary key instead of hashing the whole table.)

-- name: enqueue_jobs
-- Queue jobs, each due at its available_at or after its delay, with their
-- payloads beside them; ids that exist already are left alone.  The ids that
-- were inserted come back.
WITH items AS (
    SELECT * FROM jsonb_to_recordset(CAST(:items AS jsonb)) AS i(
        id text, queue text, kind text, digest text, saga_id text, max_attempts integer,
        delay_seconds double precision, available_at timestamptz, payload jsonb
    )
),
inserted AS (
    INSERT INTO jobs (id, queue, kind, digest, saga_id, max_attempts, available_at)
    SELECT id, queue, kind, digest, saga_id, max_attempts,
           coalesce(available_at, clock_timestamp() + make_interval(secs => delay_seconds))
    FROM items
    ORDER BY id
    ON CONFLICT (id) DO NOTHING
    RETURNING id
),
payloads AS (
    INSERT INTO job_payloads (job_id, payload)
    SELECT items.id, items.payload FROM items JOIN inserted ON inserted.id = items.id
    ON CONFLICT (job_id) DO NOTHING
)
SELECT id FROM inserted;

-- name: notify_jobs
-- Wake listening workers when the transaction commits (LISTEN saga_jobs).
SELECT pg_notify('saga_jobs', :queue);

-- name: drop_pending_job
-- Forget one job that has not started (what it was for no longer matters).
DELETE FROM jobs WHERE id = :id AND state = 'pending';

-- name: job_digests
-- The fingerprints of accepted jobs, live or finished.
SELECT id, kind, digest, state FROM jobs
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
UNION ALL
SELECT id, kind, digest, state FROM job_archive
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))));

-- name: archived_digests
-- The fingerprints of jobs that finished before, among these ids.
SELECT id, kind, digest, state FROM job_archive
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))));

-- name: forget_new_jobs
-- Undo this transaction's own inserts of jobs whose ids already finished.
DELETE FROM jobs
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
  AND state = 'pending' AND attempts = 0;

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
WITH clock AS (SELECT clock_timestamp() AS now),
exhausted AS (
    SELECT id FROM jobs
    WHERE state = 'running' AND lease_until < clock_timestamp() AND attempts >= max_attempts
      AND kind = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:kinds AS jsonb))))
    ORDER BY lease_until
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET state = 'failed', lease_token = NULL, lease_until = NULL,
    finished_at = clock.now, updated_at = clock.now, error_class = 'crashed',
    last_error = 'lease expired on the last attempt: the worker stopped without reporting '
                 || j.attempts || ' time(s)'
FROM exhausted, clock
WHERE j.id = exhausted.id
RETURNING j.id, j.kind, j.attempts;

-- name: claim_expired_jobs
-- Take over jobs whose worker lost its lease (crashed, was killed, hung).
-- With :first_time, only those whose lease expired for the first time, up to
-- :batch at once: a killed worker's batch comes back together.  Each is
-- marked 'lease_expired'; one that expires again (it may be the job that
-- kills its worker) is then taken alone (:first_time false, :batch 1).
WITH clock AS (SELECT clock_timestamp() AS now),
expired AS (
    SELECT id FROM jobs
    WHERE state = 'running' AND lease_until < clock_timestamp() AND attempts < max_attempts
      AND (NOT CAST(:first_time AS boolean) OR error_class IS DISTINCT FROM 'lease_expired')
      AND kind = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:kinds AS jsonb))))
    ORDER BY lease_until, id
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET attempts = j.attempts + 1, lease_token = :token,
    lease_until = clock.now + make_interval(secs => CAST(:lease_seconds AS double precision)),
    updated_at = clock.now, error_class = 'lease_expired',
    last_error = 'lease expired: the worker that held it stopped without reporting'
FROM expired, clock
WHERE j.id = expired.id
RETURNING j.id, j.queue, j.kind, j.saga_id, j.attempts, j.max_attempts, j.lease_until,
          (SELECT p.payload FROM job_payloads p WHERE p.job_id = j.id) AS payload;

-- name: claim_jobs
-- Claim up to :batch due jobs in one short transaction: skip rows other
-- workers hold, give each a lease from the database clock under a fresh token.
WITH clock AS (SELECT clock_timestamp() AS now),
due AS (
    SELECT id FROM jobs
    WHERE state = 'pending' AND available_at <= clock_timestamp()
      AND kind = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:kinds AS jsonb))))
    ORDER BY available_at, id
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET state = 'running', attempts = j.attempts + 1, lease_token = :token,
    lease_until = clock.now + make_interval(secs => CAST(:lease_seconds AS double precision)),
    updated_at = clock.now
FROM due, clock
WHERE j.id = due.id
RETURNING j.id, j.queue, j.kind, j.saga_id, j.attempts, j.max_attempts, j.lease_until,
          (SELECT p.payload FROM job_payloads p WHERE p.job_id = j.id) AS payload;

-- name: fence_jobs
-- Lock the listed jobs that this worker still owns: matching token and an
-- unexpired lease, checked after the row lock is taken (FOR UPDATE re-reads
-- a row another transaction changed).  Only these may be completed.
SELECT j.id FROM jobs j
JOIN jsonb_to_recordset(CAST(:items AS jsonb)) AS i(id text, token text) ON i.id = j.id
WHERE j.state = 'running' AND j.lease_token = i.token AND j.lease_until > clock_timestamp()
ORDER BY j.id
FOR UPDATE OF j;

-- name: archive_owned_jobs
-- Fence and complete in one statement: the listed jobs this worker still owns
-- (token matches, lease unexpired, checked under the row lock) move to the
-- archive as done, with their results (one per job), and leave the hot table
-- (their payloads go with them).  The ids it archived come back; the others
-- are not ours.
WITH owned AS (
    SELECT j.id, j.queue, j.kind, j.digest, j.saga_id, j.attempts, j.created_at, i.result
    FROM jobs j
    JOIN jsonb_to_recordset(CAST(:items AS jsonb)) AS i(id text, token text, result jsonb)
        ON i.id = j.id
    WHERE j.state = 'running' AND j.lease_token = i.token AND j.lease_until > clock_timestamp()
    ORDER BY j.id
    FOR UPDATE OF j
),
archived AS (
    INSERT INTO job_archive (id, queue, kind, digest, saga_id, state, attempts, created_at,
                             finished_at)
    SELECT id, queue, kind, digest, saga_id, 'done', attempts, created_at, clock_timestamp()
    FROM owned
    RETURNING id
),
results AS (
    INSERT INTO job_results (job_id, result)
    SELECT id, result FROM owned WHERE result IS NOT NULL AND result <> 'null'::jsonb
),
gone AS (
    DELETE FROM jobs WHERE id IN (SELECT id FROM owned)
)
SELECT id FROM archived;

-- name: retry_job
-- Fenced: give the job back for a later attempt, keeping the error.
WITH clock AS (SELECT clock_timestamp() AS now)
UPDATE jobs j
SET state = 'pending', lease_token = NULL, lease_until = NULL, updated_at = clock.now,
    available_at = clock.now + make_interval(secs => CAST(:delay_seconds AS double precision)),
    last_error = :error, error_class = :error_class
FROM clock
WHERE j.id = :id AND j.state = 'running' AND j.lease_token = :token AND j.lease_until > clock.now
RETURNING j.id, j.available_at;

-- name: fail_job
-- Fenced: dead-letter the job with its reason.
WITH clock AS (SELECT clock_timestamp() AS now)
UPDATE jobs j
SET state = 'failed', lease_token = NULL, lease_until = NULL, updated_at = clock.now,
    finished_at = clock.now, last_error = :error, error_class = :error_class
FROM clock
WHERE j.id = :id AND j.state = 'running' AND j.lease_token = :token AND j.lease_until > clock.now
RETURNING j.id;

-- name: extend_leases
-- Fenced: push the leases of the listed jobs of one claim further.
WITH clock AS (SELECT clock_timestamp() AS now)
UPDATE jobs j
SET lease_until = clock.now + make_interval(secs => CAST(:lease_seconds AS double precision)),
    updated_at = clock.now
FROM clock
WHERE j.id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
  AND j.state = 'running' AND j.lease_token = :token AND j.lease_until > clock.now
RETURNING j.id;

-- name: release_jobs
-- Fenced: hand claimed jobs that never started back, as if never claimed.
WITH clock AS (SELECT clock_timestamp() AS now)
UPDATE jobs j
SET state = 'pending', lease_token = NULL, lease_until = NULL, attempts = j.attempts - 1,
    updated_at = clock.now
FROM clock
WHERE j.id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
  AND j.state = 'running' AND j.lease_token = :token AND j.lease_until > clock.now
RETURNING j.id;

-- name: next_due_in
-- Seconds until the next pending job of these kinds is due (NULL: none).
-- (GREATEST ignores NULL: without the CASE an empty queue would read "due now".)
SELECT CASE WHEN min(available_at) IS NULL THEN NULL
            ELSE GREATEST(0, EXTRACT(EPOCH FROM min(available_at) - clock_timestamp())) END
FROM jobs
WHERE state = 'pending' AND kind = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:kinds AS jsonb))));

-- name: list_dead_letters
-- Dead letters, oldest first, optionally of one queue and one kind (the
-- columns of get_job, without the payload).
SELECT j.id, j.queue, j.kind, j.saga_id, j.state, j.attempts, j.max_attempts, j.available_at,
       j.lease_until, j.last_error, j.error_class, j.created_at, j.finished_at, NULL AS payload
FROM jobs j
WHERE j.state = 'failed'
  AND (CAST(:queue AS text) IS NULL OR j.queue = :queue)
  AND (CAST(:kind AS text) IS NULL OR j.kind = :kind)
  AND (CAST(:job_id AS text) IS NULL OR j.id = :job_id)
ORDER BY j.finished_at, j.id
LIMIT :limit;

-- name: replay_job
-- Give one dead letter a fresh set of attempts, due now.
WITH clock AS (SELECT clock_timestamp() AS now)
UPDATE jobs j
SET state = 'pending', attempts = 0, available_at = clock.now, finished_at = NULL,
    updated_at = clock.now
FROM clock
WHERE j.id = :id AND j.state = 'failed'
RETURNING j.id, j.queue;

-- name: record_replay
-- Audit one replay.
INSERT INTO job_replays (job_id, actor, reason, previous_error, previous_class, attempts)
VALUES (:job_id, :actor, :reason, :previous_error, :previous_class, :attempts);

-- name: queue_stats
-- Per queue: pending (and due), running, expired leases, dead letters, oldest due age.
SELECT queue,
       count(*) FILTER (WHERE state = 'pending') AS pending,
       count(*) FILTER (WHERE state = 'pending' AND available_at <= clock_timestamp()) AS due,
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE state = 'running' AND lease_until < clock_timestamp())
           AS expired_leases,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       coalesce(EXTRACT(EPOCH FROM clock_timestamp() - min(available_at)
           FILTER (WHERE state = 'pending' AND available_at <= clock_timestamp())), 0)
           AS oldest_pending_age_s
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
SELECT key1 AS queue, sum(n) AS done
FROM (SELECT key1, n FROM stat_counts WHERE metric = 'archived'
      UNION ALL
      SELECT key1, n FROM stat_deltas WHERE metric = 'archived') AS kept
GROUP BY key1
HAVING sum(n) > 0
ORDER BY key1;

-- name: saga_state_stats
-- Per saga kind and state: how many (kept counts), how long they have been
-- there on average (from the kept sum of entry times) and the oldest's time
-- (one index probe per state).
WITH kept AS (
    SELECT key1 AS kind, key2 AS state, sum(n) AS sagas, sum(total) AS entered
    FROM (SELECT key1, key2, n, total FROM stat_counts WHERE metric = 'sagas'
          UNION ALL
          SELECT key1, key2, n, total FROM stat_deltas WHERE metric = 'sagas') AS c
    GROUP BY key1, key2
    HAVING sum(n) > 0
), now_ AS (SELECT EXTRACT(EPOCH FROM clock_timestamp()) AS now)
SELECT kind, state, sagas,
       now - EXTRACT(EPOCH FROM (SELECT min(s.entered_at) FROM sagas s
                                 WHERE s.kind = kept.kind AND s.state = kept.state))
           AS oldest_in_state_s,
       now - entered / sagas AS mean_in_state_s
FROM kept, now_
ORDER BY kind, state;

-- name: roll_up_stat_deltas
-- Fold the deltas the triggers appended into the kept totals (in key order,
-- so two workers folding at once never wait on each other in a cycle).
WITH moved AS (DELETE FROM stat_deltas RETURNING metric, key1, key2, n, total)
INSERT INTO stat_counts AS c (metric, key1, key2, n, total)
SELECT metric, key1, key2, sum(n), sum(total)
FROM moved
GROUP BY metric, key1, key2
ORDER BY metric, key1, key2
ON CONFLICT (metric, key1, key2)
DO UPDATE SET n = c.n + excluded.n, total = c.total + excluded.total;

-- name: activity_last_hour
-- Per minute of the last hour: jobs finished, and jobs waiting or running at
-- its end (live jobs created before it, plus archived ones finished after it).
WITH minutes AS (
    SELECT generate_series(
        date_trunc('minute', clock_timestamp()) - interval '59 minutes',
        date_trunc('minute', clock_timestamp()),
        interval '1 minute') AS m
)
SELECT m AS minute,
       (SELECT count(*) FROM job_archive a
         WHERE a.finished_at >= m AND a.finished_at < m + interval '1 minute') AS finished,
       (SELECT count(*) FROM jobs j
         WHERE j.state <> 'failed' AND j.created_at < m + interval '1 minute')
     + (SELECT count(*) FROM job_archive a
         WHERE a.finished_at >= m + interval '1 minute'
           AND a.created_at < m + interval '1 minute') AS backlog
FROM minutes ORDER BY m;
