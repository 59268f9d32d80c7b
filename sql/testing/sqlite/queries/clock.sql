-- What saga.testing's movable clock needs: the audit trail is append-only, and
-- a test's clock moves its times too.  Only ever run on a test's own database,
-- inside the transaction that moves the clock; kept out of the engine's queries
-- (saga.testing runs them itself), so production code cannot reach them.

-- name: suspend_audit_guard
-- Let the clock's transaction shift the audit rows' times.
DROP TRIGGER saga_transitions_no_update;

-- name: restore_audit_guard
-- The audit trail is append-only again (the trigger of schema.sql).
CREATE TRIGGER saga_transitions_no_update
    BEFORE UPDATE ON saga_transitions
BEGIN
    SELECT RAISE(ABORT, 'saga_transitions is append-only: UPDATE refused');
END;
