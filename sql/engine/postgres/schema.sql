-- The current schema of the saga engine on PostgreSQL, for a fresh database.
-- Every change also gets a forward-only file in migrations/; a test checks
-- that the migrations and this file build identical catalogs.
-- Times are timestamptz from clock_timestamp(): the database clock decides.

-- One row per saga: its persisted state machine.
CREATE TABLE sagas (
    id                  text PRIMARY KEY,
    kind                text NOT NULL,
    definition_version  integer NOT NULL,
    state               text NOT NULL,
    version             integer NOT NULL DEFAULT 1,
    data                jsonb NOT NULL DEFAULT '{}',
    deadline_at         timestamptz,
    deadline_event      text,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    entered_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- 0016: when it entered a terminal state (NULL: live, or not yet marked).
    finished_at         timestamptz,
    CONSTRAINT sagas_version_positive CHECK (version >= 1),
    CONSTRAINT sagas_deadline_paired CHECK ((deadline_at IS NULL) = (deadline_event IS NULL))
);
-- Listing order, newest first: overall, and per kind and state (migration 0008).
CREATE INDEX sagas_newest ON sagas (created_at DESC, id DESC);
CREATE INDEX sagas_kind_state_newest ON sagas (kind, state, created_at DESC, id DESC);
CREATE INDEX sagas_kind_state_entered ON sagas (kind, state, entered_at);
CREATE INDEX sagas_deadline ON sagas (deadline_at) WHERE deadline_at IS NOT NULL;
-- Live sagas per kind and definition version (0016): what retiring a version
-- reads, and what a migration walks in id order.
CREATE INDEX sagas_live ON sagas (kind, definition_version, id, state) WHERE finished_at IS NULL;

-- Append-only audit: one row per transition, the creation included.
CREATE TABLE saga_transitions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id     text NOT NULL REFERENCES sagas (id),
    version     integer NOT NULL,
    from_state  text,
    to_state    text NOT NULL,
    event       text NOT NULL,
    actor       text NOT NULL,
    cause       text,
    payload     jsonb NOT NULL DEFAULT '{}',
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    job_id      text,
    lease_valid boolean,
    -- 0016: the definition version the transition was made under.
    definition_version integer,
    CONSTRAINT saga_transitions_one_per_version UNIQUE (saga_id, version)
);

CREATE FUNCTION saga_transitions_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'saga_transitions is append-only: % refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;
CREATE TRIGGER saga_transitions_no_update_or_delete
    BEFORE UPDATE OR DELETE ON saga_transitions
    FOR EACH ROW EXECUTE FUNCTION saga_transitions_append_only();
CREATE TRIGGER saga_transitions_no_truncate
    BEFORE TRUNCATE ON saga_transitions
    FOR EACH STATEMENT EXECUTE FUNCTION saga_transitions_append_only();

-- Accepted operation ids: the same id with the same digest returns the same
-- saga; with another digest it is a conflict.  The foreign key is deferred
-- because the id is claimed first, to serialize racing acceptances.
CREATE TABLE saga_operations (
    operation_id  text PRIMARY KEY,
    kind          text NOT NULL,
    digest        text NOT NULL,
    saga_id       text NOT NULL REFERENCES sagas (id) DEFERRABLE INITIALLY DEFERRED,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT saga_operations_one_per_saga UNIQUE (saga_id)
);

-- Durable work: steps queued by transitions and timers due at a database time.
-- This is the hot table: it holds pending, running and dead-lettered (failed)
-- jobs only.  Completion moves a job to job_archive in the same transaction,
-- so claims never wade through history however much of it there is.
CREATE TABLE jobs (
    id            text PRIMARY KEY,
    queue         text NOT NULL,
    kind          text NOT NULL,
    digest        text NOT NULL,
    saga_id       text REFERENCES sagas (id),
    state         text NOT NULL DEFAULT 'pending',
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL DEFAULT 3,
    available_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_token   text,
    lease_until   timestamptz,
    last_error    text,
    error_class   text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at   timestamptz,
    CONSTRAINT jobs_state_known CHECK (state IN ('pending', 'running', 'done', 'failed')),
    -- A lease (token and expiry together) exists exactly while a worker runs the job.
    CONSTRAINT jobs_lease_only_while_running CHECK (
        (state = 'running') = (lease_token IS NOT NULL)
        AND (lease_token IS NULL) = (lease_until IS NULL)
    ),
    CONSTRAINT jobs_finished_when_final CHECK (
        (state IN ('done', 'failed')) = (finished_at IS NOT NULL)
    ),
    CONSTRAINT jobs_failure_has_a_reason CHECK (state <> 'failed' OR error_class IS NOT NULL),
    CONSTRAINT jobs_attempts_in_range CHECK (
        attempts >= 0 AND max_attempts >= 1 AND attempts <= max_attempts
    )
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
-- Claims walk these partial indexes: due pending jobs in order, expired leases.
CREATE INDEX jobs_due ON jobs (available_at, id) WHERE state = 'pending';
CREATE INDEX jobs_leased ON jobs (lease_until) WHERE state = 'running';
CREATE INDEX jobs_dead ON jobs (finished_at) WHERE state = 'failed';
CREATE INDEX jobs_by_saga ON jobs (saga_id) WHERE saga_id IS NOT NULL;

-- Payloads stay out of the hot job row, which claims rewrite on every attempt.
CREATE TABLE job_payloads (
    job_id   text PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    payload  jsonb NOT NULL
);

-- Finished jobs.  Their ids stay known here, so accepting the same id again
-- returns the finished job instead of running it twice.
CREATE TABLE job_archive (
    id           text PRIMARY KEY,
    queue        text NOT NULL,
    kind         text NOT NULL,
    digest       text NOT NULL,
    saga_id      text,
    state        text NOT NULL,
    attempts     integer NOT NULL,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    CONSTRAINT job_archive_state_final CHECK (state IN ('done', 'failed'))
);
CREATE INDEX job_archive_finished ON job_archive (finished_at);

-- A job's result, written in the transaction that completes it: one per job.
CREATE TABLE job_results (
    job_id  text PRIMARY KEY,
    result  jsonb NOT NULL
);

-- Operators' dead-letter replays: who replayed what, and what it had failed with.
CREATE TABLE job_replays (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id          text NOT NULL,
    actor           text NOT NULL,
    reason          text,
    previous_error  text,
    previous_class  text,
    attempts        integer NOT NULL,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The reconciliation queue: one item per unknown outcome, owned by the
-- automatic checker until its checks run out, then by a human.
CREATE TABLE recon_items (
    id                 text PRIMARY KEY,
    saga_id            text NOT NULL REFERENCES sagas (id),
    status             text NOT NULL DEFAULT 'open',
    subject            text NOT NULL,
    reason             text NOT NULL,
    evidence           jsonb NOT NULL,
    owner              text NOT NULL,
    next_check_at      timestamptz,
    attempts           integer NOT NULL DEFAULT 0,
    max_attempts       integer NOT NULL,
    deadline           timestamptz NOT NULL,
    escalated_at       timestamptz,
    version            integer NOT NULL DEFAULT 1,
    opened_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    resolved_at        timestamptz,
    resolution         text,
    resolved_by        text,
    resolution_reason  text,
    kind               text NOT NULL DEFAULT 'outcome'
        CONSTRAINT recon_items_kind_known CHECK (kind IN ('outcome', 'review')),
    overdue_at         timestamptz,
    CONSTRAINT recon_items_status_known CHECK (status IN ('open', 'resolved')),
    CONSTRAINT recon_items_open_has_a_next_check CHECK (
        status <> 'open' OR next_check_at IS NOT NULL
    ),
    CONSTRAINT recon_items_resolution_complete CHECK (
        (status = 'resolved') = (resolved_at IS NOT NULL AND resolution IS NOT NULL
                                 AND resolved_by IS NOT NULL)
    )
);
CREATE INDEX recon_items_open ON recon_items (opened_at) WHERE status = 'open';
-- Exactly one open outcome item per saga (review items hold nothing).
CREATE UNIQUE INDEX recon_items_one_open_per_saga ON recon_items (saga_id)
    WHERE status = 'open' AND kind = 'outcome';
CREATE INDEX recon_items_deadline ON recon_items (deadline) WHERE status = 'open';

-- Everything that happened to an item: opened, checked, escalated, assigned,
-- resolved, and decisions refused (stale or contradicted by the evidence).
CREATE TABLE recon_events (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item_id   text NOT NULL REFERENCES recon_items (id),
    actor     text NOT NULL,
    action    text NOT NULL,
    detail    jsonb NOT NULL DEFAULT '{}',
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX recon_events_by_item ON recon_events (item_id, id);

-- The engine's inbox, for any application's messages: deduplicated by
-- (source, event id) in the transaction of their effect.
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
    -- 0014: the door a message came through, and what a route's observation saw.
    via           text,
    evidence      jsonb,
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

-- The transactional outbox: rows written with their transition, published by a relay.
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
-- One saga's events, published or not (the console; migration 0010).
CREATE INDEX outbox_saga ON outbox (saga_id, id);
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

-- Requests refused at the inbox's door (unsigned, mis-signed, stale, malformed
-- webhooks): kept for operators, never applied.
CREATE TABLE inbox_refusals (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source        text NOT NULL,
    reason        text NOT NULL,
    detail        text NOT NULL,
    body_digest   text NOT NULL,
    body_excerpt  text NOT NULL,
    remote        text,
    received_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX inbox_refusals_received ON inbox_refusals (received_at);

-- Events refused at the door they came through (the machine's fired_by):
-- who tried what, and why not; never applied.
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

-- The console's operators (argon2 password hashes) and their sessions (token
-- hashes, CSRF tokens, expiry by the database clock).
CREATE TABLE operators (
    name           text PRIMARY KEY,
    role           text NOT NULL,
    password_hash  text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    disabled_at    timestamptz,
    CONSTRAINT operators_role_known CHECK (role IN ('viewer', 'operator'))
);
CREATE TABLE console_sessions (
    token_hash    text PRIMARY KEY,
    operator      text NOT NULL REFERENCES operators (name),
    csrf          text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at    timestamptz NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- Figures `saga stats` would otherwise count over the whole history (sagas
-- per kind and state with the sum of their entry times, archived jobs per
-- queue, published outbox events and broker errors), kept by triggers in the
-- writing transaction.  Writers only append deltas, so no worker queues on a
-- counter row; workers fold the deltas into the totals now and then and
-- readers add the two.
CREATE TABLE stat_counts (
    metric  text NOT NULL,
    key1    text NOT NULL,
    key2    text NOT NULL,
    n       bigint NOT NULL,
    total   numeric NOT NULL,
    PRIMARY KEY (metric, key1, key2)
);
CREATE TABLE stat_deltas (
    metric  text NOT NULL,
    key1    text NOT NULL,
    key2    text NOT NULL,
    n       bigint NOT NULL,
    total   numeric NOT NULL
);

-- Each statement's change, netted per key (an update that leaves the counted
-- columns alone adds nothing).  A trigger with transition tables has one
-- event, hence three per table and a branch per event.
CREATE FUNCTION stat_count_sagas() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'sagas', kind, state, count(*), sum(EXTRACT(EPOCH FROM entered_at))
        FROM new_rows GROUP BY kind, state;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'sagas', kind, state, -count(*), -sum(EXTRACT(EPOCH FROM entered_at))
        FROM old_rows GROUP BY kind, state;
    ELSE
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'sagas', kind, state, sum(n), sum(total)
        FROM (SELECT kind, state, 1 AS n, EXTRACT(EPOCH FROM entered_at) AS total FROM new_rows
              UNION ALL
              SELECT kind, state, -1, -EXTRACT(EPOCH FROM entered_at) FROM old_rows) AS change
        GROUP BY kind, state
        HAVING sum(n) <> 0 OR sum(total) <> 0;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER sagas_counted_insert AFTER INSERT ON sagas
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_sagas();
CREATE TRIGGER sagas_counted_update AFTER UPDATE ON sagas
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_sagas();
CREATE TRIGGER sagas_counted_delete AFTER DELETE ON sagas
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_sagas();

CREATE FUNCTION stat_count_archive() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'archived', queue, '', count(*), 0 FROM new_rows GROUP BY queue;
    ELSE
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'archived', queue, '', -count(*), 0 FROM old_rows GROUP BY queue;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_archive_counted_insert AFTER INSERT ON job_archive
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_archive();
CREATE TRIGGER job_archive_counted_delete AFTER DELETE ON job_archive
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_archive();

-- The outbox: n counts published events, total sums broker errors.
CREATE FUNCTION stat_count_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'outbox', '', '', count(published_at), sum(errors)
        FROM new_rows
        HAVING count(published_at) <> 0 OR sum(errors) <> 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'outbox', '', '', -count(published_at), -sum(errors)
        FROM old_rows
        HAVING count(published_at) <> 0 OR sum(errors) <> 0;
    ELSE
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'outbox', '', '', sum(n), sum(total)
        FROM (SELECT count(published_at) AS n, sum(errors) AS total FROM new_rows
              UNION ALL
              SELECT -count(published_at), -sum(errors) FROM old_rows) AS change
        HAVING sum(n) <> 0 OR sum(total) <> 0;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_counted_insert AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_outbox();
CREATE TRIGGER outbox_counted_update AFTER UPDATE ON outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_outbox();
CREATE TRIGGER outbox_counted_delete AFTER DELETE ON outbox
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_outbox();

-- 0012: console sign-in attempts (throttle and audit).
CREATE TABLE sign_in_attempts (
    id        bigserial PRIMARY KEY,
    operator  text NOT NULL,
    address   text NOT NULL,
    outcome   text NOT NULL,
    attempts  integer NOT NULL DEFAULT 1,
    first_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT sign_in_attempts_outcome_known
        CHECK (outcome IN ('pending', 'accepted', 'refused', 'throttled'))
);
CREATE INDEX sign_in_attempts_by_operator ON sign_in_attempts (operator, last_at);
CREATE INDEX sign_in_attempts_by_address ON sign_in_attempts (address, last_at);
CREATE INDEX sign_in_attempts_by_time ON sign_in_attempts (last_at);

-- Refused requests counted per hour, provider and reason (0013); the
-- newest are kept whole in inbox_refusals, trimmed by the door.
CREATE TABLE inbox_refusal_counts (
    hour     timestamptz NOT NULL,
    source   text NOT NULL,
    reason   text NOT NULL,
    n        bigint NOT NULL,
    bytes    bigint NOT NULL,
    last_at  timestamptz NOT NULL,
    PRIMARY KEY (hour, source, reason)
);
