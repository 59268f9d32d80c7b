-- 0005: the transactional outbox, and how far retention has pruned.
-- An outbox row is written in the transaction of the transition that
-- declares it; a relay publishes it and marks it published only after the
-- broker confirmed.  event_id is stable (saga id, version, type), so a
-- republished row is recognisable downstream.  An event the broker keeps
-- refusing is dead-lettered (dead_at, with last_error as the reason).
CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        text NOT NULL UNIQUE,
    type            text NOT NULL,
    schema_version  integer NOT NULL,
    saga_id         text NOT NULL REFERENCES sagas (id),
    saga_kind       text NOT NULL,
    saga_version    integer NOT NULL,
    occurred_at     timestamptz NOT NULL,
    data            jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    available_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempts        integer NOT NULL DEFAULT 0,
    errors          integer NOT NULL DEFAULT 0,
    refusals        integer NOT NULL DEFAULT 0,
    last_error      text,
    lease_token     text,
    lease_until     timestamptz,
    published_at    timestamptz,
    dead_at         timestamptz,
    CONSTRAINT outbox_lease_paired CHECK ((lease_token IS NULL) = (lease_until IS NULL)),
    CONSTRAINT outbox_published_unleased CHECK (published_at IS NULL OR lease_token IS NULL),
    CONSTRAINT outbox_dead_unpublished CHECK (
        dead_at IS NULL OR (published_at IS NULL AND lease_token IS NULL)
    )
);
-- The relay's claim: the oldest unpublished row of each saga.
CREATE INDEX outbox_unpublished ON outbox (saga_id, id) WHERE published_at IS NULL;
CREATE INDEX outbox_due ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Operators' replays of dead-lettered events: who, why, and what it had failed with.
CREATE TABLE outbox_replays (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        text NOT NULL,
    batch           text NOT NULL,
    actor           text NOT NULL,
    reason          text,
    previous_error  text,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The newest cut-off of each kind of pruned row: verify checks outbox rows
-- only for transitions after it (older published rows may have been pruned).
CREATE TABLE prune_horizons (
    target   text PRIMARY KEY,
    horizon  timestamptz NOT NULL
);

-- Sagas may predate their events: verify asks for the outbox rows of
-- transitions from here on.
INSERT INTO prune_horizons (target, horizon) VALUES ('outbox', clock_timestamp());
