-- 0011: events refused at the door they came through (an operator's
-- `instances fire` of a reconciliation outcome, a route firing a timer's
-- event): the machine says who may fire each event.  A refusal changes no
-- saga; it is kept so that operators see who tried what, and why not.
CREATE TABLE event_refusals (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id   text NOT NULL REFERENCES sagas (id),
    event     text NOT NULL,
    origin    text NOT NULL,
    actor     text NOT NULL,
    cause     text,
    why       text NOT NULL,
    payload   jsonb NOT NULL DEFAULT '{}',
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX event_refusals_by_saga ON event_refusals (saga_id, id);
