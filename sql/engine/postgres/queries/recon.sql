-- The reconciliation queue: items for unknown outcomes, their checks and their audit.
-- PostgreSQL; sql/engine/sqlite/queries/recon.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.

-- name: insert_recon_item
-- Open an item; its next check and deadline come from the database clock.
WITH clock AS (SELECT clock_timestamp() AS now)
INSERT INTO recon_items (id, saga_id, kind, subject, reason, evidence, owner, next_check_at,
                         max_attempts, deadline, escalated_at, opened_at)
SELECT :id, :saga_id, :kind, :subject, :reason, CAST(:evidence AS jsonb), :owner,
       clock.now + make_interval(secs => CAST(:next_check_seconds AS double precision)),
       :max_attempts,
       clock.now + make_interval(secs => CAST(:deadline_seconds AS double precision)),
       CASE WHEN CAST(:escalated AS boolean) THEN clock.now END,
       clock.now
FROM clock
RETURNING id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts,
          max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution,
          resolved_by, resolution_reason, kind, overdue_at;

-- name: get_recon_item
-- One item.
SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts,
       max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution,
       resolved_by, resolution_reason, kind, overdue_at
FROM recon_items WHERE id = :id;

-- name: lock_recon_item
-- One item, locked to decide about it.
SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts,
       max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution,
       resolved_by, resolution_reason, kind, overdue_at
FROM recon_items WHERE id = :id
FOR UPDATE;

-- name: open_recon_item_of_saga
-- The open outcome item of a saga (the one holding it in reconciliation), locked.
SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts,
       max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution,
       resolved_by, resolution_reason, kind, overdue_at
FROM recon_items WHERE saga_id = :saga_id AND status = 'open' AND kind = 'outcome'
FOR UPDATE;

-- name: any_open_recon_item_of_saga
-- A saga's open item of any kind, outcome first, locked.
SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts,
       max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution,
       resolved_by, resolution_reason, kind, overdue_at
FROM recon_items WHERE saga_id = :saga_id AND status = 'open'
ORDER BY kind = 'outcome' DESC, opened_at
LIMIT 1
FOR UPDATE;

-- name: latest_recon_item_of_saga
-- A saga's most recent item, open or not.
SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts,
       max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution,
       resolved_by, resolution_reason, kind, overdue_at
FROM recon_items WHERE saga_id = :saga_id
ORDER BY opened_at DESC, id DESC
LIMIT 1;

-- name: list_recon_items
-- Items, oldest first, optionally by status and owner.
SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts,
       max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution,
       resolved_by, resolution_reason, kind, overdue_at
FROM recon_items
WHERE (CAST(:status AS text) IS NULL OR status = :status)
  AND (CAST(:owner AS text) IS NULL OR owner = :owner)
  AND (NOT CAST(:overdue AS boolean) OR overdue_at IS NOT NULL)
ORDER BY opened_at, id
LIMIT :limit;

-- name: record_recon_check
-- Compare-and-set after an automatic check that settled nothing: the new
-- evidence, the attempt counted, the next check (or the escalation) planned.
WITH clock AS (SELECT clock_timestamp() AS now)
UPDATE recon_items
SET evidence = CAST(:evidence AS jsonb), attempts = attempts + 1, owner = :owner,
    next_check_at = clock.now + make_interval(secs => CAST(:next_check_seconds AS double precision)),
    escalated_at = CASE WHEN CAST(:escalated AS boolean) THEN clock.now ELSE escalated_at END,
    version = version + 1
FROM clock
WHERE id = :id AND status = 'open' AND version = :version
RETURNING id, version, next_check_at, attempts, owner;

-- name: assign_recon_item
-- Compare-and-set the owner of an open item.
UPDATE recon_items SET owner = :owner, version = version + 1
WHERE id = :id AND status = 'open' AND version = :version
RETURNING id, version;

-- name: resolve_recon_item
-- Compare-and-set an open item to resolved.
UPDATE recon_items
SET status = 'resolved', resolved_at = clock_timestamp(), resolution = :resolution,
    resolved_by = :resolved_by, resolution_reason = :resolution_reason, version = version + 1
WHERE id = :id AND status = 'open' AND version = :version
RETURNING id, version;

-- name: insert_recon_event
-- Audit one thing that happened to an item.
INSERT INTO recon_events (item_id, actor, action, detail)
VALUES (:item_id, :actor, :action, CAST(:detail AS jsonb));

-- name: list_recon_events
-- An item's audit trail, oldest first.
SELECT actor, action, detail, at FROM recon_events WHERE item_id = :item_id ORDER BY id;

-- name: recon_backlog
-- Open items and the age of the oldest.
SELECT count(*) AS open,
       coalesce(EXTRACT(EPOCH FROM clock_timestamp() - min(opened_at)), 0) AS oldest_age_s,
       count(*) FILTER (WHERE escalated_at IS NOT NULL) AS escalated,
       count(*) FILTER (WHERE overdue_at IS NOT NULL) AS overdue,
       count(*) FILTER (WHERE kind = 'review') AS review
FROM recon_items WHERE status = 'open';

-- name: record_settling_check
-- An automatic check that settles the item: its evidence, and the look
-- counted as an attempt.  The version stays: the outcome event fired next,
-- in the same transaction, resolves the item at that version.
UPDATE recon_items SET evidence = CAST(:evidence AS jsonb), attempts = attempts + 1
WHERE id = :id AND status = 'open' AND version = :version;

-- name: set_recon_evidence
-- Add what a check saw to an item that is about to be resolved.
UPDATE recon_items SET evidence = CAST(:evidence AS jsonb) WHERE id = :id AND status = 'open';

-- name: escalate_overdue_item
-- The item's deadline passed unresolved: compare-and-set it to the
-- operators, escalated and marked overdue (once; its next check stays).
UPDATE recon_items
SET owner = 'operators', overdue_at = clock_timestamp(),
    escalated_at = coalesce(escalated_at, clock_timestamp()), version = version + 1
WHERE id = :id AND status = 'open' AND overdue_at IS NULL AND deadline <= clock_timestamp()
RETURNING id, version, saga_id, reason, deadline;
