-- Jobs: acceptance, claims, fenced writes, dead letters, statistics.
-- SQLite; sql/postgres/queries/jobs.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.
-- Write transactions start with BEGIN IMMEDIATE: they hold the write lock from
-- their first statement, so no FOR UPDATE is needed.

-- name: enqueue_job
-- Queue a job due after a delay; nothing if the id exists.
INSERT INTO jobs (id, queue, kind, digest, saga_id, max_attempts, available_at)
VALUES (
    :id, :queue, :kind, :digest, :saga_id, :max_attempts,
    strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + :delay_seconds / 86400.0)
)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: enqueue_saga_timer
-- Queue the timer of a saga's current deadline, due at that deadline.
INSERT INTO jobs (id, queue, kind, digest, saga_id, max_attempts, available_at)
SELECT :id, :queue, :kind, :digest, s.id, :max_attempts, s.deadline_at
FROM sagas s
WHERE s.id = :saga_id AND s.deadline_at IS NOT NULL
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: insert_job_payload
-- Store a job's payload beside it.
INSERT INTO job_payloads (job_id, payload) VALUES (:job_id, :payload)
ON CONFLICT (job_id) DO NOTHING;

-- name: drop_pending_timers
-- Forget a saga's timers that have not fired: its state changed.
DELETE FROM jobs
WHERE saga_id = :saga_id AND kind = :kind AND state = 'pending';

-- name: list_saga_jobs
-- The jobs of one saga, oldest first.
SELECT j.id, j.queue, j.kind, j.state, j.attempts, j.available_at, p.payload
FROM jobs j LEFT JOIN job_payloads p ON p.job_id = j.id
WHERE j.saga_id = :saga_id
ORDER BY j.created_at, j.id;

-- name: get_job_digest
-- The fingerprint of an accepted job, to compare a repeated acceptance with.
SELECT id, kind, digest FROM jobs WHERE id = :id;
