-- The inbox: provider events, deduplicated by event id in the transaction of their effect.
-- SQLite; sql/purchase/postgres/queries/inbox.sql defines the same names.

-- name: insert_inbox_event
-- Claim an event id; no row back means the id was seen before.
INSERT INTO inbox (event_id, source, type, payment_ref, digest, payload, outcome)
VALUES (:event_id, :source, :type, :payment_ref, :digest, :payload, 'unmatched')
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id;

-- name: get_inbox_event
-- One event as the inbox recorded it.
SELECT event_id, source, type, payment_ref, digest, payload, saga_id, outcome, detail, received_at,
       evidence
FROM inbox WHERE event_id = :event_id;

-- name: settle_inbox_event
-- What applying the event did.
UPDATE inbox SET saga_id = :saga_id, outcome = :outcome, detail = :detail,
    evidence = :evidence
WHERE event_id = :event_id;

-- name: insert_inbox_conflict
-- The same event id with other content: recorded, never applied.
INSERT INTO inbox_conflicts (event_id, digest, payload)
VALUES (:event_id, :digest, :payload);

-- name: inbox_of_saga
-- The provider events the inbox matched to one purchase, oldest first.
SELECT source, event_id, type, outcome, detail, received_at
FROM inbox WHERE saga_id = :saga_id ORDER BY received_at, event_id LIMIT :limit;
