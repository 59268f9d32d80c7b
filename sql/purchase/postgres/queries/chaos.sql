-- What `saga chaos` reads besides the public services: the provider events
-- the inbox took (to deliver some again, late and out of order), and the
-- events the outbox holds (to find any the consumer never received).

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
