-- 0011: events refused at the door they came through (an operator's
-- `instances fire` of a reconciliation outcome, a route firing a timer's
-- event): the machine says who may fire each event.  A refusal changes no
-- saga; it is kept so that operators see who tried what, and why not.
CREATE TABLE event_refusals (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id   TEXT NOT NULL REFERENCES sagas (id),
    event     TEXT NOT NULL,
    origin    TEXT NOT NULL,
    actor     TEXT NOT NULL,
    cause     TEXT,
    why       TEXT NOT NULL,
    payload   TEXT NOT NULL DEFAULT '{}',
    at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT event_refusals_payload_json CHECK (json_valid(payload))
) STRICT;
CREATE INDEX event_refusals_by_saga ON event_refusals (saga_id, id);
