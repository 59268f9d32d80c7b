-- What saga.testing's movable clock needs: the audit trail is append-only, and
-- a test's clock moves its times too.  Only ever run on a test's own database,
-- inside the transaction that moves the clock; kept out of the engine's queries
-- (saga.testing runs them itself), so production code cannot reach them.

-- name: suspend_audit_guard
-- Let the clock's transaction shift the audit rows' times.
ALTER TABLE saga_transitions DISABLE TRIGGER saga_transitions_no_update_or_delete;

-- name: restore_audit_guard
-- The audit trail is append-only again.
ALTER TABLE saga_transitions ENABLE TRIGGER saga_transitions_no_update_or_delete;
