-- 0003: one inbox.  The provider's events go through the engine's inbox now
-- (engine migration 0014: routes that observe before they apply), as messages
-- of source 'provider' keyed by event id as before.  Every event and every
-- recorded conflict of the purchase's own inbox is carried over, nothing
-- dropped: the door it came through (old `source`) into `via`; the content
-- whole under `payload` beside its type, in the engine's shape; the digest as
-- it was (the purchase's routes compute it the same way, so an old event
-- delivered again is a duplicate, not a conflict); the evidence with its keys
-- in the engine's words (`provider` -> `observed`, `contradictions` ->
-- `disagreements`, any other key kept).  Then the old tables go.
INSERT INTO inbox_messages (
    source, event_id, type, digest, payload, saga_id, outcome, detail, received_at, via, evidence
)
SELECT 'provider', event_id, type, digest, jsonb_build_object('type', type, 'payload', payload),
       saga_id, outcome, detail, received_at, source,
       CASE WHEN evidence IS NULL THEN NULL ELSE
           (evidence - 'provider' - 'contradictions')
           || jsonb_build_object(
               'observed', evidence -> 'provider',
               'disagreements', evidence -> 'contradictions'
           )
       END
FROM inbox ORDER BY received_at, event_id;

INSERT INTO inbox_message_conflicts (source, event_id, digest, payload, received_at)
SELECT 'provider', event_id, digest,
       jsonb_build_object('type', payload -> 'type', 'payload', payload), received_at
FROM inbox_conflicts ORDER BY id;

DROP TABLE inbox_conflicts;
DROP TABLE inbox;

-- Read-only views under the old names, for operators' queries written
-- against them: the provider's events as the engine's inbox holds them.
CREATE VIEW inbox AS
SELECT event_id, via AS source, type, payload -> 'payload' ->> 'payment_id' AS payment_ref,
       digest, payload -> 'payload' AS payload, saga_id, outcome, detail, received_at, evidence
FROM inbox_messages WHERE source = 'provider';

CREATE VIEW inbox_conflicts AS
SELECT id, event_id, digest, payload -> 'payload' AS payload, received_at
FROM inbox_message_conflicts WHERE source = 'provider';
