-- The chaos harness's faults (`saga chaos`), run only on the database it drives.

-- name: chaos_terminate_sessions
-- Fault injection: end every other session of one application name (the
-- chaos harness's workers), as a failover or an administrator would.
SELECT count(*) FILTER (WHERE ended) AS terminated
FROM (
    SELECT pg_terminate_backend(pid) AS ended
    FROM pg_stat_activity
    WHERE application_name = :application_name AND pid <> pg_backend_pid()
) AS sessions;
