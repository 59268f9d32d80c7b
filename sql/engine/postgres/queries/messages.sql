-- The engine's inbox: any application's messages, applied at most once.
-- PostgreSQL; the other dialect defines the same names.

-- name: claim_message
-- Claim (source, event id); no row back means it was seen before.
INSERT INTO inbox_messages (source, event_id, type, digest, payload, outcome)
VALUES (:source, :event_id, :type, :digest, CAST(:payload AS jsonb), 'unmatched')
ON CONFLICT (source, event_id) DO NOTHING
RETURNING event_id;

-- name: get_message
-- One message as the inbox recorded it.
SELECT source, event_id, type, digest, payload, saga_id, outcome, detail, received_at
FROM inbox_messages WHERE source = :source AND event_id = :event_id;

-- name: settle_message
-- What applying the message did.
UPDATE inbox_messages SET saga_id = :saga_id, outcome = :outcome, detail = :detail
WHERE source = :source AND event_id = :event_id;

-- name: record_message_conflict
-- The same (source, event id) with other content: recorded, never applied.
INSERT INTO inbox_message_conflicts (source, event_id, digest, payload)
VALUES (:source, :event_id, :digest, CAST(:payload AS jsonb));

-- name: record_refusal
-- A request refused at the door (bad signature, malformed body, unknown
-- provider): kept for operators, nothing applied.
INSERT INTO inbox_refusals (source, reason, detail, body_digest, body_excerpt, remote)
VALUES (:source, :reason, :detail, :body_digest, :body_excerpt, :remote);

-- name: list_refusals
-- The newest refusals first.
SELECT id, source, reason, detail, body_digest, body_excerpt, remote, received_at
FROM inbox_refusals ORDER BY id DESC LIMIT :limit;

-- name: messages_of_saga
-- The messages the inbox matched to one saga, oldest first.
SELECT source, event_id, type, outcome, detail, received_at
FROM inbox_messages WHERE saga_id = :saga_id ORDER BY received_at, event_id LIMIT :limit;
