-- 0004: the engine's inbox, for any application's messages.  A message is
-- deduplicated by (source, event id) in the transaction of its effect; the
-- same id with other content is a recorded conflict; a message no saga
-- matches yet is kept ('unmatched') and matched again when it comes again.
CREATE TABLE inbox_messages (
    source        TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    type          TEXT NOT NULL,
    digest        TEXT NOT NULL,
    payload       TEXT NOT NULL,
    saga_id       TEXT REFERENCES sagas (id),
    outcome       TEXT NOT NULL,
    detail        TEXT,
    received_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (source, event_id),
    CONSTRAINT inbox_messages_payload_json CHECK (json_valid(payload)),
    CONSTRAINT inbox_messages_outcome_known CHECK (
        outcome IN ('applied', 'absorbed', 'not_applicable', 'unmatched')
    )
) STRICT;
CREATE INDEX inbox_messages_by_saga ON inbox_messages (saga_id) WHERE saga_id IS NOT NULL;

CREATE TABLE inbox_message_conflicts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    source       TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    digest       TEXT NOT NULL,
    payload      TEXT NOT NULL,
    received_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT inbox_message_conflicts_payload_json CHECK (json_valid(payload)),
    FOREIGN KEY (source, event_id) REFERENCES inbox_messages (source, event_id)
) STRICT;
