-- The chaos harness's faults (`saga chaos`), run only on the database it drives.

-- name: chaos_terminate_sessions
-- An embedded database has no sessions to end: nothing is terminated.
SELECT 0 AS terminated WHERE :application_name IS NOT NULL OR 1 = 1;
