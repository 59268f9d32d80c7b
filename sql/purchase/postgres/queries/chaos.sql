-- What `saga chaos` reads besides the public services: the provider events
-- the inbox took (to deliver some again, late and out of order), and the
-- events the outbox holds (to find any the consumer never received); and its
-- faults, run only on the database it drives.

-- name: chaos_delivered_events
-- The provider's events the inbox took, newest first.
SELECT event_id, payload
FROM inbox
WHERE source = 'sandbox'
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
