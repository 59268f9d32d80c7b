-- The engine's inbox: any application's messages, applied at most once.
-- PostgreSQL; the other dialect defines the same names.

-- name: claim_message
-- Claim (source, event id); no row back means it was seen before.
INSERT INTO inbox_messages (source, event_id, type, digest, payload, outcome, via)
VALUES (:source, :event_id, :type, :digest, CAST(:payload AS jsonb), 'unmatched', :via)
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
    evidence = CAST(:evidence AS jsonb)
WHERE source = :source AND event_id = :event_id;

-- name: record_message_conflict
-- The same (source, event id) with other content: recorded, never applied.
INSERT INTO inbox_message_conflicts (source, event_id, digest, payload)
VALUES (:source, :event_id, :digest, CAST(:payload AS jsonb));

-- name: count_refusal
-- One more refused request in this hour's count (UTC) for its provider and reason.
INSERT INTO inbox_refusal_counts AS c (hour, source, reason, n, bytes, last_at)
VALUES (date_trunc('hour', clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
        :source, :reason, 1, :bytes, clock_timestamp())
ON CONFLICT (hour, source, reason)
DO UPDATE SET n = c.n + 1, bytes = c.bytes + excluded.bytes,
              last_at = greatest(c.last_at, excluded.last_at);

-- name: record_refusal
-- A request refused at the door (bad signature, malformed body, unknown
-- provider), kept whole for operators, nothing applied; then only the newest
-- :keep are kept (identity values only grow; a gap only keeps fewer).
WITH added AS (
    INSERT INTO inbox_refusals (source, reason, detail, body_digest, body_excerpt, remote)
    VALUES (:source, :reason, :detail, :body_digest, :body_excerpt, :remote)
    RETURNING id
)
DELETE FROM inbox_refusals WHERE id <= (SELECT id FROM added) - CAST(:keep AS bigint);

-- name: list_refusals
-- The newest refusals first.
SELECT id, source, reason, detail, body_digest, body_excerpt, remote, received_at
FROM inbox_refusals ORDER BY id DESC LIMIT :limit;

-- name: list_refusal_counts
-- Refused requests per hour, provider and reason, over the last :hours hours
-- (this one included), newest first.
SELECT hour, source, reason, n, bytes, last_at
FROM inbox_refusal_counts
WHERE hour >= date_trunc('hour', clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
               - make_interval(hours => CAST(:hours AS integer) - 1)
ORDER BY hour DESC, source, reason;

-- name: messages_of_saga
-- The messages the inbox matched to one saga, oldest first.
SELECT source, event_id, type, outcome, detail, received_at, via
FROM inbox_messages WHERE saga_id = :saga_id ORDER BY received_at, event_id LIMIT :limit;
