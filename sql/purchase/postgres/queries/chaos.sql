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
-- Fault injection: end every other session of one application name (the
-- chaos harness's workers), as a failover or an administrator would.
SELECT count(*) FILTER (WHERE ended) AS terminated
FROM (
    SELECT pg_terminate_backend(pid) AS ended
    FROM pg_stat_activity
    WHERE application_name = :application_name AND pid <> pg_backend_pid()
) AS sessions;

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
       EXTRACT(EPOCH FROM p.created_at - s.created_at)
         - CAST(s.data ->> 'hold_seconds' AS double precision) AS late_s
FROM payments p
JOIN sagas s ON s.id = p.saga_id
WHERE p.created_at > s.created_at
      + make_interval(secs => CAST(s.data ->> 'hold_seconds' AS double precision) + 1);

-- name: chaos_refuse_outbox_writes
-- Fault injection: the database refuses one outbox insert in twenty (a
-- failure between a transition and its event: both must roll back).
-- statements: 3
CREATE OR REPLACE FUNCTION chaos_refuse_outbox_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF random() < 0.05 THEN
        RAISE EXCEPTION 'chaos: outbox write refused';
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS chaos_refuse_outbox_write ON outbox;
CREATE TRIGGER chaos_refuse_outbox_write BEFORE INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION chaos_refuse_outbox_write();

-- name: chaos_allow_outbox_writes
-- The outbox takes every write again.
-- statements: 2
DROP TRIGGER IF EXISTS chaos_refuse_outbox_write ON outbox;
DROP FUNCTION IF EXISTS chaos_refuse_outbox_write();
