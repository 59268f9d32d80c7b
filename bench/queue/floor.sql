-- The raw-SQL floor: the engine's own claim and completion statements
-- (sql/engine/postgres/queries/jobs.sql), run by pgbench with nothing around them.
-- One script run = one claim transaction + one completion transaction, like
-- one round of a worker with batch :batch.
\set token random(1, 1000000000000)
BEGIN;
WITH clock AS (SELECT clock_timestamp() AS now),
exhausted AS (
    SELECT id FROM jobs
    WHERE state = 'running' AND lease_until < clock_timestamp() AND attempts >= max_attempts
      AND kind = ANY (ARRAY(SELECT jsonb_array_elements_text('["noop"]'::jsonb)))
    ORDER BY lease_until LIMIT 100 FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET state = 'failed', lease_token = NULL, lease_until = NULL,
    finished_at = clock.now, updated_at = clock.now, error_class = 'crashed', last_error = 'x'
FROM exhausted, clock WHERE j.id = exhausted.id;
WITH clock AS (SELECT clock_timestamp() AS now),
expired AS (
    SELECT id FROM jobs
    WHERE state = 'running' AND lease_until < clock_timestamp() AND attempts < max_attempts
      AND kind = ANY (ARRAY(SELECT jsonb_array_elements_text('["noop"]'::jsonb)))
    ORDER BY lease_until, id LIMIT 1 FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET attempts = j.attempts + 1, lease_token = 'floor',
    lease_until = clock.now + interval '30 seconds', updated_at = clock.now
FROM expired, clock WHERE j.id = expired.id;
WITH clock AS (SELECT clock_timestamp() AS now),
due AS (
    SELECT id FROM jobs
    WHERE state = 'pending' AND available_at <= clock_timestamp()
      AND kind = ANY (ARRAY(SELECT jsonb_array_elements_text('["noop"]'::jsonb)))
    ORDER BY available_at, id LIMIT :batch FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE jobs j SET state = 'running', attempts = j.attempts + 1,
        lease_token = 'floor-' || :client_id || '-' || :token,
        lease_until = clock.now + interval '30 seconds', updated_at = clock.now
    FROM due, clock WHERE j.id = due.id
    RETURNING j.id
)
SELECT coalesce(jsonb_agg(id), '[]'::jsonb)::text AS ids FROM claimed \gset
COMMIT;
BEGIN;
SELECT j.id FROM jobs j
WHERE j.id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))))
  AND j.state = 'running' AND j.lease_token = 'floor-' || :client_id || '-' || :token
  AND j.lease_until > clock_timestamp()
ORDER BY j.id FOR UPDATE OF j;
INSERT INTO job_archive (id, queue, kind, digest, saga_id, state, attempts, created_at, finished_at)
SELECT id, queue, kind, digest, saga_id, 'done', attempts, created_at, clock_timestamp()
FROM jobs WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))));
DELETE FROM jobs WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))));
COMMIT;
