-- The engine's inbox: any application's messages, applied at most once.
-- SQLite; the other dialect defines the same names.

-- name: claim_message
-- Claim (source, event id); no row back means it was seen before.
INSERT INTO inbox_messages (source, event_id, type, digest, payload, outcome, via)
VALUES (:source, :event_id, :type, :digest, :payload, 'unmatched', :via)
ON CONFLICT (source, event_id) DO NOTHING
RETURNING event_id;

-- name: get_message
-- One message as the inbox recorded it.
SELECT source, event_id, type, digest, payload, saga_id, outcome, detail, received_at, via,
       evidence
FROM inbox_messages WHERE source = :source AND event_id = :event_id;

-- name: settle_message
-- What applying the message did, and what its route observed (NULL: nothing asked).
UPDATE inbox_messages SET saga_id = :saga_id, outcome = :outcome, detail = :detail,
    evidence = :evidence
WHERE source = :source AND event_id = :event_id;

-- name: record_message_conflict
-- The same (source, event id) with other content: recorded, never applied.
INSERT INTO inbox_message_conflicts (source, event_id, digest, payload)
VALUES (:source, :event_id, :digest, :payload);

-- name: count_refusal
-- One more refused request in this hour's count for its provider and reason.
INSERT INTO inbox_refusal_counts (hour, source, reason, n, bytes, last_at)
VALUES (strftime('%Y-%m-%dT%H:00:00Z', 'now'), :source, :reason, 1, :bytes,
        strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
ON CONFLICT (hour, source, reason)
DO UPDATE SET n = n + 1, bytes = bytes + excluded.bytes, last_at = excluded.last_at;

-- name: record_refusal
-- statements: 2
-- A request refused at the door (bad signature, malformed body, unknown
-- provider), kept whole for operators, nothing applied; then only the newest
-- :keep are kept (ids only grow: AUTOINCREMENT).
INSERT INTO inbox_refusals (source, reason, detail, body_digest, body_excerpt, remote)
VALUES (:source, :reason, :detail, :body_digest, :body_excerpt, :remote);
DELETE FROM inbox_refusals WHERE id <= last_insert_rowid() - :keep;

-- name: list_refusals
-- The newest refusals first.
SELECT id, source, reason, detail, body_digest, body_excerpt, remote, received_at
FROM inbox_refusals ORDER BY id DESC LIMIT :limit;

-- name: list_refusal_counts
-- Refused requests per hour, provider and reason, over the last :hours hours
-- (this one included), newest first.
SELECT hour, source, reason, n, bytes, last_at
FROM inbox_refusal_counts
WHERE hour >= strftime('%Y-%m-%dT%H:00:00Z', 'now', printf('-%d hours', :hours - 1))
ORDER BY hour DESC, source, reason;

-- name: messages_of_saga
-- The messages the inbox matched to one saga, oldest first.
SELECT source, event_id, type, outcome, detail, received_at, via
FROM inbox_messages WHERE saga_id = :saga_id ORDER BY received_at, event_id LIMIT :limit;
