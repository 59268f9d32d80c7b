-- What `saga chaos` reads besides the public services: the provider events
-- the inbox took (to deliver some again, late and out of order), and the
-- events the outbox holds (to find any the consumer never received); and its
-- faults, run only on the database it drives.

-- name: chaos_delivered_events
-- The provider's events the engine's inbox took from the sandbox, newest first.
SELECT event_id, type, payload
FROM inbox_messages
WHERE source = 'provider' AND via = 'sandbox'
ORDER BY received_at DESC
LIMIT :limit;

-- name: chaos_outbox_events
-- Every event id in the outbox, and whether the relay published it.
SELECT event_id, published_at IS NOT NULL AS published
FROM outbox;

-- name: chaos_terminate_sessions
-- An embedded database has no sessions to end: nothing is terminated.
SELECT 0 AS terminated WHERE :application_name IS NOT NULL OR 1 = 1;

-- name: chaos_outbox_rows
-- The outbox's events after :after (by row id), as a consumer receives them.
SELECT id, event_id, type, schema_version, saga_id, saga_kind, saga_version, occurred_at, data
FROM outbox
WHERE id > :after
ORDER BY id
LIMIT :limit;

-- name: chaos_timer_transitions
-- Every transition a timer made: the cause names the version it was set for.
SELECT saga_id, version, event, cause
FROM saga_transitions
WHERE actor = 'timer';

-- name: chaos_payments_after_hold
-- Payment intents written more than a second after their purchase's hold ran
-- out by the database clock (the second: the intent's own insert time).
SELECT p.saga_id,
       (julianday(p.created_at) - julianday(s.created_at)) * 86400.0
         - CAST(json_extract(s.data, '$.hold_seconds') AS REAL) AS late_s
FROM payments p
JOIN sagas s ON s.id = p.saga_id
WHERE (julianday(p.created_at) - julianday(s.created_at)) * 86400.0
      > CAST(json_extract(s.data, '$.hold_seconds') AS REAL) + 1;

-- name: chaos_refuse_outbox_writes
-- Fault injection: the database refuses one outbox insert in twenty (a
-- failure between a transition and its event: both must roll back).
-- statements: 2
DROP TRIGGER IF EXISTS chaos_refuse_outbox_write;
CREATE TRIGGER chaos_refuse_outbox_write BEFORE INSERT ON outbox
WHEN abs(random()) % 20 = 0
BEGIN
    SELECT RAISE(ABORT, 'chaos: outbox write refused');
END;

-- name: chaos_allow_outbox_writes
-- The outbox takes every write again.
DROP TRIGGER IF EXISTS chaos_refuse_outbox_write;
