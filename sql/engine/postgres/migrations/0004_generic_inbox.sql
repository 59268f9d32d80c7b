-- 0004: the engine's inbox, for any application's messages.  A message is
-- deduplicated by (source, event id) in the transaction of its effect; the
-- same id with other content is a recorded conflict; a message no saga
-- matches yet is kept ('unmatched') and matched again when it comes again.
CREATE TABLE inbox_messages (
    source        text NOT NULL,
    event_id      text NOT NULL,
    type          text NOT NULL,
    digest        text NOT NULL,
    payload       jsonb NOT NULL,
    saga_id       text REFERENCES sagas (id),
    outcome       text NOT NULL,
    detail        text,
    received_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (source, event_id),
    CONSTRAINT inbox_messages_outcome_known CHECK (
        outcome IN ('applied', 'absorbed', 'not_applicable', 'unmatched')
    )
);
CREATE INDEX inbox_messages_by_saga ON inbox_messages (saga_id) WHERE saga_id IS NOT NULL;

CREATE TABLE inbox_message_conflicts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source       text NOT NULL,
    event_id     text NOT NULL,
    digest       text NOT NULL,
    payload      jsonb NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    FOREIGN KEY (source, event_id) REFERENCES inbox_messages (source, event_id)
);
