-- Named queries of the saga engine on PostgreSQL.
-- Each block: "-- name: <snake_case>", a description, one statement with
-- :named parameters (bound by SQLAlchemy, never formatted into the text).
-- sql/sqlite/queries.sql defines the same names; a test holds them equal.

-- name: lock_migrations
-- Serialize concurrent `saga db upgrade` runs until the transaction ends.
SELECT pg_advisory_xact_lock(:key);

-- name: migrations_table_exists
-- Whether saga_migrations exists in the current search_path.
SELECT to_regclass('saga_migrations') IS NOT NULL;

-- name: has_engine_tables
-- Whether the engine's tables exist (a schema created before tracking began).
SELECT to_regclass('sagas') IS NOT NULL;

-- name: schema_version
-- The highest applied migration.
SELECT coalesce(max(version), 0) FROM saga_migrations;

-- name: applied_migrations
-- Every applied migration with its checksum.
SELECT version, name, checksum FROM saga_migrations ORDER BY version;

-- name: record_migration
-- Mark one migration applied.
INSERT INTO saga_migrations (version, name, checksum) VALUES (:version, :name, :checksum);

-- name: db_now
-- The database clock, which decides leases and deadlines.
SELECT clock_timestamp();

-- name: insert_intensive
-- Add an intensive with every seat free; nothing if the id exists.
INSERT INTO intensives (id, capacity, price_minor, currency)
VALUES (:id, :capacity, :price_minor, :currency)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: get_intensive
-- One intensive with its seat counters.
SELECT id, capacity, price_minor, currency, held, taken, created_at
FROM intensives WHERE id = :id;

-- name: list_intensives
-- Intensives in id order, after a cursor.
SELECT id, capacity, price_minor, currency, held, taken, created_at
FROM intensives
WHERE id > :after
ORDER BY id
LIMIT :limit;

-- name: move_seats
-- Shift seat counters by the deltas if every counter stays in range:
-- a conditional update, so two buyers can never take the same last seat.
UPDATE intensives
SET held = held + :held_delta, taken = taken + :taken_delta
WHERE id = :id
  AND held + :held_delta >= 0
  AND taken + :taken_delta >= 0
  AND held + taken + :held_delta + :taken_delta <= capacity
RETURNING id;

-- name: insert_saga
-- Create a saga in its initial state, with its first deadline if any; one
-- reading of the clock stamps it, so the deadline is exactly creation + timeout.
WITH clock AS (SELECT clock_timestamp() AS now)
INSERT INTO sagas (id, kind, definition_version, state, data, deadline_event, deadline_at,
                   created_at, entered_at, updated_at)
SELECT :id, :kind, :definition_version, :state, CAST(:data AS jsonb), :deadline_event,
       CASE WHEN CAST(:deadline_seconds AS double precision) IS NULL THEN NULL
            ELSE clock.now + make_interval(secs => CAST(:deadline_seconds AS double precision))
       END,
       clock.now, clock.now, clock.now
FROM clock
RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
          created_at, entered_at, updated_at;

-- name: get_saga
-- One saga.
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas WHERE id = :id;

-- name: lock_saga
-- One saga, locked until the transaction ends, to decide its next transition.
SELECT id, kind, definition_version, state, version, data, deadline_at, deadline_event,
       created_at, entered_at, updated_at
FROM sagas WHERE id = :id
FOR UPDATE;

-- name: transition_saga
-- Compare-and-set: move the saga only if it is still in the state and at the
-- version the decision was made on; set its next deadline from the database clock.
WITH clock AS (SELECT clock_timestamp() AS now)
UPDATE sagas
SET state = :to_state,
    version = version + 1,
    data = CAST(:data AS jsonb),
    deadline_event = :deadline_event,
    deadline_at = CASE
        WHEN CAST(:deadline_seconds AS double precision) IS NULL THEN NULL
        WHEN CAST(:deadline_since_created AS boolean)
            THEN created_at + make_interval(secs => CAST(:deadline_seconds AS double precision))
        ELSE clock.now + make_interval(secs => CAST(:deadline_seconds AS double precision))
    END,
    entered_at = clock.now,
    updated_at = clock.now
FROM clock
WHERE id = :id AND state = :from_state AND version = :version
RETURNING id, kind, definition_version, state, version, data, deadline_at, deadline_event,
          created_at, entered_at, updated_at;

-- name: insert_transition
-- Append one audit row.
INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor, cause, payload)
VALUES (:saga_id, :version, :from_state, :to_state, :event, :actor, :cause, CAST(:payload AS jsonb));

-- name: list_transitions
-- A saga's audit trail, oldest first.
SELECT version, from_state, to_state, event, actor, cause, payload, at
FROM saga_transitions WHERE saga_id = :saga_id
ORDER BY version;

-- name: claim_operation
-- Claim an operation id; no row back means it was claimed before (maybe just now,
-- by a concurrent transaction this one waited for).
INSERT INTO saga_operations (operation_id, kind, digest, saga_id)
VALUES (:operation_id, :kind, :digest, :saga_id)
ON CONFLICT (operation_id) DO NOTHING
RETURNING operation_id;

-- name: get_operation
-- An accepted operation id.
SELECT operation_id, kind, digest, saga_id, created_at
FROM saga_operations WHERE operation_id = :operation_id;

-- name: operation_of_saga
-- The operation id that created a saga.
SELECT operation_id FROM saga_operations WHERE saga_id = :saga_id;

-- name: enqueue_job
-- Queue a job due after a delay; nothing if the id exists.
INSERT INTO jobs (id, queue, kind, digest, saga_id, max_attempts, available_at)
VALUES (
    :id, :queue, :kind, :digest, :saga_id, :max_attempts,
    clock_timestamp() + make_interval(secs => CAST(:delay_seconds AS double precision))
)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: enqueue_saga_timer
-- Queue the timer of a saga's current deadline, due at that deadline.
INSERT INTO jobs (id, queue, kind, digest, saga_id, max_attempts, available_at)
SELECT :id, :queue, :kind, :digest, s.id, :max_attempts, s.deadline_at
FROM sagas s
WHERE s.id = :saga_id AND s.deadline_at IS NOT NULL
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: insert_job_payload
-- Store a job's payload beside it.
INSERT INTO job_payloads (job_id, payload) VALUES (:job_id, CAST(:payload AS jsonb))
ON CONFLICT (job_id) DO NOTHING;

-- name: drop_pending_timers
-- Forget a saga's timers that have not fired: its state changed.
DELETE FROM jobs
WHERE saga_id = :saga_id AND kind = :kind AND state = 'pending';

-- name: list_saga_jobs
-- The jobs of one saga, oldest first.
SELECT j.id, j.queue, j.kind, j.state, j.attempts, j.available_at, p.payload
FROM jobs j LEFT JOIN job_payloads p ON p.job_id = j.id
WHERE j.saga_id = :saga_id
ORDER BY j.created_at, j.id;

-- name: insert_purchase
-- The purchase's own row, its seat not yet counted.
INSERT INTO purchases (saga_id, intensive_id, student_id, amount_minor, currency, seat)
VALUES (:saga_id, :intensive_id, :student_id, :amount_minor, :currency, :seat);

-- name: purchase_seat
-- Where a purchase's seat is, locked with the saga's transaction.
SELECT intensive_id, seat FROM purchases WHERE saga_id = :saga_id FOR UPDATE;

-- name: set_purchase_seat
-- Compare-and-set the seat of one purchase.
UPDATE purchases SET seat = :to_seat
WHERE saga_id = :saga_id AND seat = :from_seat;

-- name: get_purchase
-- One purchase with its saga and operation id.
SELECT s.id, o.operation_id, p.intensive_id, p.student_id, p.amount_minor, p.currency, p.seat,
       s.state, s.version, s.data, s.deadline_at, s.deadline_event, s.created_at, s.updated_at
FROM purchases p
JOIN sagas s ON s.id = p.saga_id
LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE p.saga_id = :saga_id;

-- name: list_purchases
-- Purchases, newest first, optionally of one state and one intensive.
SELECT s.id, o.operation_id, p.intensive_id, p.student_id, p.amount_minor, p.currency, p.seat,
       s.state, s.version, s.data, s.deadline_at, s.deadline_event, s.created_at, s.updated_at
FROM purchases p
JOIN sagas s ON s.id = p.saga_id
LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE (CAST(:state AS text) IS NULL OR s.state = :state)
  AND (CAST(:intensive_id AS text) IS NULL OR p.intensive_id = :intensive_id)
ORDER BY s.created_at DESC, s.id DESC
LIMIT :limit;

-- name: seat_ledger
-- Per intensive: the counters and what the purchases' own seats add up to.
SELECT i.id, i.capacity, i.held, i.taken,
       count(p.saga_id) FILTER (WHERE p.seat = 'held') AS purchases_held,
       count(p.saga_id) FILTER (WHERE p.seat = 'taken') AS purchases_taken
FROM intensives i
LEFT JOIN purchases p ON p.intensive_id = i.id
GROUP BY i.id, i.capacity, i.held, i.taken
ORDER BY i.id;

-- name: get_job_digest
-- The fingerprint of an accepted job, to compare a repeated acceptance with.
SELECT id, kind, digest FROM jobs WHERE id = :id;

-- name: student_seat
-- The purchase through which a student holds or has a seat of an intensive, if any.
SELECT saga_id FROM purchases
WHERE intensive_id = :intensive_id AND student_id = :student_id AND seat <> 'free';
