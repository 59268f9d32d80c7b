-- The current schema of the saga engine on SQLite, for a fresh database.
-- Every change also gets a forward-only file in migrations/; a test checks
-- that the migrations and this file build identical catalogs.
-- Times are ISO 8601 text in UTC with milliseconds ('2026-11-30T07:08:55.123Z'),
-- written by strftime() in SQL: the database clock decides, and text order is
-- time order.  JSON documents are text checked with json_valid().

-- One row per saga: its persisted state machine.
CREATE TABLE sagas (
    id                  TEXT PRIMARY KEY,
    kind                TEXT NOT NULL,
    definition_version  INTEGER NOT NULL,
    state               TEXT NOT NULL,
    version             INTEGER NOT NULL DEFAULT 1,
    data                TEXT NOT NULL DEFAULT '{}',
    deadline_at         TEXT,
    deadline_event      TEXT,
    created_at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    entered_at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    -- 0016: when it entered a terminal state (NULL: live, or not yet marked).
    finished_at         TEXT,
    CONSTRAINT sagas_version_positive CHECK (version >= 1),
    CONSTRAINT sagas_data_json CHECK (json_valid(data)),
    CONSTRAINT sagas_deadline_paired CHECK ((deadline_at IS NULL) = (deadline_event IS NULL))
) STRICT;
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
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id     TEXT NOT NULL REFERENCES sagas (id),
    version     INTEGER NOT NULL,
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    event       TEXT NOT NULL,
    actor       TEXT NOT NULL,
    cause       TEXT,
    payload     TEXT NOT NULL DEFAULT '{}',
    at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    job_id      TEXT,
    lease_valid INTEGER
        CONSTRAINT saga_transitions_lease_valid_bool CHECK (lease_valid IN (0, 1)),
    -- 0016: the definition version the transition was made under.
    definition_version INTEGER,
    CONSTRAINT saga_transitions_payload_json CHECK (json_valid(payload)),
    CONSTRAINT saga_transitions_one_per_version UNIQUE (saga_id, version)
) STRICT;

CREATE TRIGGER saga_transitions_no_update
    BEFORE UPDATE ON saga_transitions
BEGIN
    SELECT RAISE(ABORT, 'saga_transitions is append-only: UPDATE refused');
END;
CREATE TRIGGER saga_transitions_no_delete
    BEFORE DELETE ON saga_transitions
BEGIN
    SELECT RAISE(ABORT, 'saga_transitions is append-only: DELETE refused');
END;

-- Accepted operation ids: the same id with the same digest returns the same
-- saga; with another digest it is a conflict.  The foreign key is deferred
-- because the id is claimed first, to serialize racing acceptances.
CREATE TABLE saga_operations (
    operation_id  TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    digest        TEXT NOT NULL,
    saga_id       TEXT NOT NULL REFERENCES sagas (id) DEFERRABLE INITIALLY DEFERRED,
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT saga_operations_one_per_saga UNIQUE (saga_id)
) STRICT;

-- Durable work: steps queued by transitions and timers due at a database time.
-- This is the hot table: it holds pending, running and dead-lettered (failed)
-- jobs only.  Completion moves a job to job_archive in the same transaction,
-- so claims never wade through history however much of it there is.
CREATE TABLE jobs (
    id            TEXT PRIMARY KEY,
    queue         TEXT NOT NULL,
    kind          TEXT NOT NULL,
    digest        TEXT NOT NULL,
    saga_id       TEXT REFERENCES sagas (id),
    state         TEXT NOT NULL DEFAULT 'pending',
    attempts      INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL DEFAULT 3,
    available_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    lease_token   TEXT,
    lease_until   TEXT,
    last_error    TEXT,
    error_class   TEXT,
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at   TEXT,
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
) STRICT;
-- Claims walk these partial indexes: due pending jobs in order, expired leases.
CREATE INDEX jobs_due ON jobs (available_at, id) WHERE state = 'pending';
CREATE INDEX jobs_leased ON jobs (lease_until) WHERE state = 'running';
CREATE INDEX jobs_dead ON jobs (finished_at) WHERE state = 'failed';
CREATE INDEX jobs_by_saga ON jobs (saga_id) WHERE saga_id IS NOT NULL;

-- Payloads stay out of the hot job row, which claims rewrite on every attempt.
CREATE TABLE job_payloads (
    job_id   TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    payload  TEXT NOT NULL,
    CONSTRAINT job_payloads_json CHECK (json_valid(payload))
) STRICT;

-- Finished jobs.  Their ids stay known here, so accepting the same id again
-- returns the finished job instead of running it twice.
CREATE TABLE job_archive (
    id           TEXT PRIMARY KEY,
    queue        TEXT NOT NULL,
    kind         TEXT NOT NULL,
    digest       TEXT NOT NULL,
    saga_id      TEXT,
    state        TEXT NOT NULL,
    attempts     INTEGER NOT NULL,
    created_at   TEXT NOT NULL,
    finished_at  TEXT NOT NULL,
    CONSTRAINT job_archive_state_final CHECK (state IN ('done', 'failed'))
) STRICT;
CREATE INDEX job_archive_finished ON job_archive (finished_at);

-- A job's result, written in the transaction that completes it: one per job.
CREATE TABLE job_results (
    job_id  TEXT PRIMARY KEY,
    result  TEXT NOT NULL,
    CONSTRAINT job_results_json CHECK (json_valid(result))
) STRICT;

-- Operators' dead-letter replays: who replayed what, and what it had failed with.
CREATE TABLE job_replays (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id          TEXT NOT NULL,
    actor           TEXT NOT NULL,
    reason          TEXT,
    previous_error  TEXT,
    previous_class  TEXT,
    attempts        INTEGER NOT NULL,
    at              TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

-- The reconciliation queue: one item per unknown outcome, owned by the
-- automatic checker until its checks run out, then by a human.
CREATE TABLE recon_items (
    id                 TEXT PRIMARY KEY,
    saga_id            TEXT NOT NULL REFERENCES sagas (id),
    status             TEXT NOT NULL DEFAULT 'open',
    subject            TEXT NOT NULL,
    reason             TEXT NOT NULL,
    evidence           TEXT NOT NULL,
    owner              TEXT NOT NULL,
    next_check_at      TEXT,
    attempts           INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL,
    deadline           TEXT NOT NULL,
    escalated_at       TEXT,
    version            INTEGER NOT NULL DEFAULT 1,
    opened_at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    resolved_at        TEXT,
    resolution         TEXT,
    resolved_by        TEXT,
    resolution_reason  TEXT,
    kind               TEXT NOT NULL DEFAULT 'outcome'
        CONSTRAINT recon_items_kind_known CHECK (kind IN ('outcome', 'review')),
    overdue_at         TEXT,
    CONSTRAINT recon_items_evidence_json CHECK (json_valid(evidence)),
    CONSTRAINT recon_items_status_known CHECK (status IN ('open', 'resolved')),
    CONSTRAINT recon_items_open_has_a_next_check CHECK (
        status <> 'open' OR next_check_at IS NOT NULL
    ),
    CONSTRAINT recon_items_resolution_complete CHECK (
        (status = 'resolved') = (resolved_at IS NOT NULL AND resolution IS NOT NULL
                                 AND resolved_by IS NOT NULL)
    )
) STRICT;
CREATE INDEX recon_items_open ON recon_items (opened_at) WHERE status = 'open';
-- Exactly one open outcome item per saga (review items hold nothing).
CREATE UNIQUE INDEX recon_items_one_open_per_saga ON recon_items (saga_id)
    WHERE status = 'open' AND kind = 'outcome';
CREATE INDEX recon_items_deadline ON recon_items (deadline) WHERE status = 'open';

-- Everything that happened to an item: opened, checked, escalated, assigned,
-- resolved, and decisions refused (stale or contradicted by the evidence).
CREATE TABLE recon_events (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id   TEXT NOT NULL REFERENCES recon_items (id),
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    detail    TEXT NOT NULL DEFAULT '{}',
    at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT recon_events_detail_json CHECK (json_valid(detail))
) STRICT;
CREATE INDEX recon_events_by_item ON recon_events (item_id, id);

-- The engine's inbox, for any application's messages: deduplicated by
-- (source, event id) in the transaction of their effect.  `via` and `evidence`
-- came with migration 0014 (hence their place): the door a message came
-- through, and what a route's observation saw.
CREATE TABLE inbox_messages (
    source        TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    type          TEXT NOT NULL,
    digest        TEXT NOT NULL,
    payload       TEXT NOT NULL,
    saga_id       TEXT REFERENCES sagas (id),
    outcome       TEXT NOT NULL,
    detail        TEXT,
    received_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), via TEXT, evidence TEXT
    CONSTRAINT inbox_messages_evidence_json CHECK (evidence IS NULL OR json_valid(evidence)),
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

-- The transactional outbox: rows written with their transition, published by a relay.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL UNIQUE,
    type            TEXT NOT NULL,
    schema_version  INTEGER NOT NULL,
    saga_id         TEXT NOT NULL REFERENCES sagas (id),
    saga_kind       TEXT NOT NULL,
    saga_version    INTEGER NOT NULL,
    occurred_at     TEXT NOT NULL,
    data            TEXT NOT NULL,
    created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    available_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    errors          INTEGER NOT NULL DEFAULT 0,
    refusals        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    lease_token     TEXT,
    lease_until     TEXT,
    published_at    TEXT,
    dead_at         TEXT,
    CONSTRAINT outbox_data_json CHECK (json_valid(data)),
    CONSTRAINT outbox_lease_paired CHECK ((lease_token IS NULL) = (lease_until IS NULL)),
    CONSTRAINT outbox_published_unleased CHECK (published_at IS NULL OR lease_token IS NULL),
    CONSTRAINT outbox_dead_unpublished CHECK (
        dead_at IS NULL OR (published_at IS NULL AND lease_token IS NULL)
    )
) STRICT;
-- The relay's claim: the oldest unpublished row of each saga.
CREATE INDEX outbox_unpublished ON outbox (saga_id, id) WHERE published_at IS NULL;
-- One saga's events, published or not (the console; migration 0010).
CREATE INDEX outbox_saga ON outbox (saga_id, id);
CREATE INDEX outbox_due ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Operators' replays of dead-lettered events: who, why, and what it had failed with.
CREATE TABLE outbox_replays (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL,
    batch           TEXT NOT NULL,
    actor           TEXT NOT NULL,
    reason          TEXT,
    previous_error  TEXT,
    at              TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

-- The newest cut-off of each kind of pruned row: verify checks outbox rows
-- only for transitions after it (older published rows may have been pruned).
CREATE TABLE prune_horizons (
    target   TEXT PRIMARY KEY,
    horizon  TEXT NOT NULL
) STRICT;

-- Sagas may predate their events: verify asks for the outbox rows of
-- transitions from here on.
INSERT INTO prune_horizons (target, horizon) VALUES ('outbox', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));

-- Requests refused at the inbox's door (unsigned, mis-signed, stale, malformed
-- webhooks): kept for operators, never applied.
CREATE TABLE inbox_refusals (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    source        TEXT NOT NULL,
    reason        TEXT NOT NULL,
    detail        TEXT NOT NULL,
    body_digest   TEXT NOT NULL,
    body_excerpt  TEXT NOT NULL,
    remote        TEXT,
    received_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
CREATE INDEX inbox_refusals_received ON inbox_refusals (received_at);

-- Events refused at the door they came through (the machine's fired_by):
-- who tried what, and why not; never applied.
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

-- The console's operators (argon2 password hashes) and their sessions (token
-- hashes, CSRF tokens, expiry by the database clock).
CREATE TABLE operators (
    name           TEXT PRIMARY KEY,
    role           TEXT NOT NULL,
    password_hash  TEXT NOT NULL,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    disabled_at    TEXT,
    CONSTRAINT operators_role_known CHECK (role IN ('viewer', 'operator'))
) STRICT;
CREATE TABLE console_sessions (
    token_hash    TEXT PRIMARY KEY,
    operator      TEXT NOT NULL REFERENCES operators (name),
    csrf          TEXT NOT NULL,
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    last_seen_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    expires_at    TEXT NOT NULL
) STRICT;
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- Figures `saga stats` would otherwise count over the whole history (sagas
-- per kind and state with the sum of their entry times, archived jobs per
-- queue, published outbox events and broker errors), kept by triggers in the
-- writing transaction; SQLite has one writer at a time, so they add to the
-- totals directly.
CREATE TABLE stat_counts (
    metric  TEXT NOT NULL,
    key1    TEXT NOT NULL,
    key2    TEXT NOT NULL,
    n       INTEGER NOT NULL,
    total   INTEGER NOT NULL,
    PRIMARY KEY (metric, key1, key2)
) STRICT;

-- Sagas: n counts them, total sums their entry times in milliseconds since
-- 1970 (an INTEGER: exact up to some four million sagas in one state, then
-- SQLite carries on in floating point).
CREATE TRIGGER sagas_counted_insert AFTER INSERT ON sagas
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('sagas', new.kind, new.state, 1,
            CAST(round((julianday(new.entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;
CREATE TRIGGER sagas_counted_update AFTER UPDATE OF kind, state, entered_at ON sagas
WHEN old.kind IS NOT new.kind OR old.state IS NOT new.state
     OR old.entered_at IS NOT new.entered_at
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('sagas', old.kind, old.state, -1,
            -CAST(round((julianday(old.entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('sagas', new.kind, new.state, 1,
            CAST(round((julianday(new.entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;
CREATE TRIGGER sagas_counted_delete AFTER DELETE ON sagas
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('sagas', old.kind, old.state, -1,
            -CAST(round((julianday(old.entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;

-- Archived jobs per queue.
CREATE TRIGGER job_archive_counted_insert AFTER INSERT ON job_archive
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('archived', new.queue, '', 1, 0)
    ON CONFLICT DO UPDATE SET n = n + excluded.n;
END;
CREATE TRIGGER job_archive_counted_delete AFTER DELETE ON job_archive
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('archived', old.queue, '', -1, 0)
    ON CONFLICT DO UPDATE SET n = n + excluded.n;
END;

-- The outbox: n counts published events, total sums broker errors.
CREATE TRIGGER outbox_counted_insert AFTER INSERT ON outbox
WHEN new.published_at IS NOT NULL OR new.errors <> 0
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('outbox', '', '', new.published_at IS NOT NULL, new.errors)
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;
CREATE TRIGGER outbox_counted_update AFTER UPDATE OF published_at, errors ON outbox
WHEN (old.published_at IS NULL) IS NOT (new.published_at IS NULL) OR old.errors <> new.errors
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('outbox', '', '', (new.published_at IS NOT NULL) - (old.published_at IS NOT NULL),
            new.errors - old.errors)
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;
CREATE TRIGGER outbox_counted_delete AFTER DELETE ON outbox
WHEN old.published_at IS NOT NULL OR old.errors <> 0
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('outbox', '', '', -(old.published_at IS NOT NULL), -old.errors)
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;

-- 0012: console sign-in attempts (throttle and audit).
CREATE TABLE sign_in_attempts (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    operator  TEXT NOT NULL,
    address   TEXT NOT NULL,
    outcome   TEXT NOT NULL,
    attempts  INTEGER NOT NULL DEFAULT 1,
    first_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    last_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT sign_in_attempts_outcome_known
        CHECK (outcome IN ('pending', 'accepted', 'refused', 'throttled'))
) STRICT;
CREATE INDEX sign_in_attempts_by_operator ON sign_in_attempts (operator, last_at);
CREATE INDEX sign_in_attempts_by_address ON sign_in_attempts (address, last_at);
CREATE INDEX sign_in_attempts_by_time ON sign_in_attempts (last_at);

-- Refused requests counted per hour, provider and reason (0013); the
-- newest are kept whole in inbox_refusals, trimmed by the door.
CREATE TABLE inbox_refusal_counts (
    hour     TEXT NOT NULL,
    source   TEXT NOT NULL,
    reason   TEXT NOT NULL,
    n        INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    last_at  TEXT NOT NULL,
    PRIMARY KEY (hour, source, reason)
) STRICT;
