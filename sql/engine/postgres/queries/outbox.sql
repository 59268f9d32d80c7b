-- The transactional outbox: rows written with their transition, published by a relay.
-- PostgreSQL; sql/engine/sqlite/queries/outbox.sql defines the same names.

-- name: insert_outbox_event
-- One event of a transition, in its transaction; it occurred when the saga
-- entered its state (the same reading of the database clock).
INSERT INTO outbox (event_id, type, schema_version, saga_id, saga_kind, saga_version,
                    occurred_at, data)
SELECT :event_id, :type, :schema_version, :saga_id, :saga_kind, :saga_version,
       s.entered_at, CAST(:data AS jsonb)
FROM sagas s WHERE s.id = :saga_id;

-- name: claim_outbox
-- Claim up to :batch events to publish, each under a lease from the database
-- clock and a fresh token.  Only the oldest unpublished event of each saga
-- is eligible, so a saga's events go out in order (a dead-lettered event
-- no longer holds its saga back); rows another relay is
-- claiming are skipped, not waited for.
WITH clock AS (SELECT clock_timestamp() AS now),
due AS (
    SELECT o.id FROM outbox o
    WHERE o.published_at IS NULL AND o.dead_at IS NULL
      AND o.available_at <= clock_timestamp()
      AND (o.lease_until IS NULL OR o.lease_until <= clock_timestamp())
      AND NOT EXISTS (
          SELECT 1 FROM outbox e
          WHERE e.saga_id = o.saga_id AND e.published_at IS NULL AND e.dead_at IS NULL
            AND e.id < o.id
      )
    ORDER BY o.id
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox o
SET lease_token = :token, attempts = o.attempts + 1,
    lease_until = clock.now + make_interval(secs => CAST(:lease_seconds AS double precision))
FROM due, clock
WHERE o.id = due.id
RETURNING o.id, o.event_id, o.type, o.schema_version, o.saga_id, o.saga_kind, o.saga_version,
          o.occurred_at, o.data, o.attempts, o.errors, o.refusals;

-- name: mark_outbox_published
-- The broker confirmed these: published, if this relay still holds their
-- lease (token and an unexpired lease by the database clock).
UPDATE outbox
SET published_at = clock_timestamp(), lease_token = NULL, lease_until = NULL, last_error = NULL
WHERE id IN (SELECT CAST(value AS bigint) FROM jsonb_array_elements_text(CAST(:ids AS jsonb)))
  AND lease_token = :token AND lease_until > clock_timestamp() AND published_at IS NULL
RETURNING id;

-- name: fail_outbox
-- Publishing failed: give the rows back, due again after :delay_seconds, or
-- dead-lettered with :dead (the broker refused it too often; the error says why).
-- :refused counts a refusal of this very event (not a connection failure).
UPDATE outbox
SET lease_token = NULL, lease_until = NULL, last_error = :error, errors = errors + 1,
    refusals = refusals + CASE WHEN CAST(:refused AS boolean) THEN 1 ELSE 0 END,
    available_at = clock_timestamp() + make_interval(secs => CAST(:delay_seconds AS double precision)),
    dead_at = CASE WHEN CAST(:dead AS boolean) THEN clock_timestamp() END
WHERE id IN (SELECT CAST(value AS bigint) FROM jsonb_array_elements_text(CAST(:ids AS jsonb)))
  AND lease_token = :token AND lease_until > clock_timestamp() AND published_at IS NULL;

-- name: release_outbox
-- A stopping relay gives back what it claimed and did not publish, due now.
UPDATE outbox
SET lease_token = NULL, lease_until = NULL
WHERE id IN (SELECT CAST(value AS bigint) FROM jsonb_array_elements_text(CAST(:ids AS jsonb)))
  AND lease_token = :token AND published_at IS NULL;

-- name: outbox_next_due_in
-- Seconds until an unpublished event can be claimed (NULL: none waits); only
-- each saga's oldest counts, as in the claim (the others wait behind it).
SELECT EXTRACT(EPOCH FROM min(greatest(o.available_at, coalesce(o.lease_until, o.available_at)))
                          - clock_timestamp()) AS seconds
FROM outbox o
WHERE o.published_at IS NULL AND o.dead_at IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM outbox e
      WHERE e.saga_id = o.saga_id AND e.published_at IS NULL AND e.dead_at IS NULL
        AND e.id < o.id
  );

-- name: outbox_stats
-- Unpublished events, the oldest one's age, publications in the last minute,
-- and broker errors on the rows retention has kept.  Only waiting rows are
-- read (a partial index); published ones and errors come from the kept
-- counts.  The subquery makes the last minute's bound usable by the index.
WITH kept AS (
    SELECT coalesce(sum(n), 0) AS published, coalesce(sum(total), 0) AS broker_errors
    FROM (SELECT n, total FROM stat_counts WHERE metric = 'outbox'
          UNION ALL
          SELECT n, total FROM stat_deltas WHERE metric = 'outbox') AS c
), waiting AS (
    SELECT count(*) FILTER (WHERE dead_at IS NULL) AS unpublished,
           count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead,
           EXTRACT(EPOCH FROM clock_timestamp() - min(created_at) FILTER (WHERE dead_at IS NULL))
               AS oldest_unpublished_age_s,
           count(*) FILTER (WHERE dead_at IS NULL AND last_error IS NOT NULL) AS failing
    FROM outbox WHERE published_at IS NULL
)
SELECT waiting.*, kept.*,
       (SELECT count(*) FROM outbox
        WHERE published_at > (SELECT clock_timestamp() - interval '60 seconds'))
           AS published_last_minute
FROM waiting, kept;

-- name: outbox_last_error
-- The newest error of an event still waiting.
SELECT event_id, last_error FROM outbox
WHERE published_at IS NULL AND last_error IS NOT NULL
ORDER BY id DESC LIMIT 1;

-- name: outbox_of_saga
-- One saga's events, newest first (an index: as fast with a long history).
SELECT id, event_id, type, schema_version, saga_id, saga_kind, saga_version, occurred_at, data,
       attempts, errors, last_error, published_at, dead_at
FROM outbox
WHERE saga_id = :saga_id
ORDER BY id DESC
LIMIT :limit;

-- name: list_outbox
-- Events, newest first; only unpublished ones with :unpublished.
SELECT id, event_id, type, schema_version, saga_id, saga_kind, saga_version, occurred_at, data,
       attempts, errors, last_error, published_at, dead_at
FROM outbox
WHERE (NOT CAST(:unpublished AS boolean) OR published_at IS NULL)
  AND (NOT CAST(:dead AS boolean) OR dead_at IS NOT NULL)
  AND (CAST(:saga_id AS text) IS NULL OR saga_id = :saga_id)
ORDER BY id DESC
LIMIT :limit;

-- name: record_outbox_replays
-- Audit the replay about to happen, under :batch: one row per dead-lettered
-- event, with its error (on PostgreSQL the events stay locked until commit).
INSERT INTO outbox_replays (event_id, batch, actor, reason, previous_error)
SELECT event_id, :batch, :actor, :reason, last_error FROM outbox
WHERE dead_at IS NOT NULL AND (CAST(:event_id AS text) IS NULL OR event_id = :event_id)
FOR UPDATE;

-- name: replay_outbox
-- Give the dead-lettered events audited under :batch a fresh start, due now
-- (an event dead-lettered meanwhile waits for the next replay: none unaudited).
UPDATE outbox
SET dead_at = NULL, errors = 0, refusals = 0, available_at = clock_timestamp()
WHERE dead_at IS NOT NULL
  AND event_id IN (SELECT event_id FROM outbox_replays WHERE batch = :batch)
RETURNING event_id;

-- name: verify_dead_events
-- Events the broker refused until they were dead-lettered.
SELECT event_id, type, last_error FROM outbox WHERE dead_at IS NOT NULL ORDER BY id;

-- name: outbox_counts_of_saga
-- One saga's events: waiting, published, dead-lettered.
SELECT count(*) FILTER (WHERE published_at IS NULL AND dead_at IS NULL) AS unpublished,
       count(*) FILTER (WHERE published_at IS NOT NULL) AS published,
       count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead
FROM outbox WHERE saga_id = :saga_id;
