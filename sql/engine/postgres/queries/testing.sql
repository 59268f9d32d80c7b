-- What saga.testing's movable clock needs: the audit trail is append-only, and
-- a test's clock moves its times too.  Only ever run on a test's own database,
-- inside the transaction that moves the clock.

-- name: testing_suspend_audit_guard
-- Let the clock's transaction shift the audit rows' times.
ALTER TABLE saga_transitions DISABLE TRIGGER saga_transitions_no_update_or_delete;

-- name: testing_restore_audit_guard
-- The audit trail is append-only again.
ALTER TABLE saga_transitions ENABLE TRIGGER saga_transitions_no_update_or_delete;

-- name: testing_terminate_sessions
-- Fault injection: end every other session of one application name (the
-- chaos harness's workers), as a failover or an administrator would.
SELECT count(*) FILTER (WHERE ended) AS terminated
FROM (
    SELECT pg_terminate_backend(pid) AS ended
    FROM pg_stat_activity
    WHERE application_name = :application_name AND pid <> pg_backend_pid()
) AS sessions;
