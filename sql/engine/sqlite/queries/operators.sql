-- The console's operators and sessions.  SQLite; the other dialect defines the same names.

-- name: insert_operator
-- A new operator; no row back means the name is taken.
INSERT INTO operators (name, role, password_hash) VALUES (:name, :role, :password_hash)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: get_operator
-- One operator, with the hash to check a password against.
SELECT name, role, password_hash, created_at, disabled_at FROM operators WHERE name = :name;

-- name: list_operators
-- Every operator, by name.
SELECT name, role, created_at, disabled_at FROM operators ORDER BY name;

-- name: set_operator_password
-- A new password hash (a rehash with stronger parameters, or a reset).
UPDATE operators SET password_hash = :password_hash WHERE name = :name;

-- name: disable_operator
-- The operator can no longer sign in; their sessions end.
UPDATE operators SET disabled_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE name = :name AND disabled_at IS NULL;

-- name: insert_console_session
-- A session for an operator, ending after :lifetime_seconds by the database clock.
INSERT INTO console_sessions (token_hash, operator, csrf, expires_at)
VALUES (:token_hash, :operator, :csrf,
        strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') + :lifetime_seconds / 86400.0));

-- name: touch_console_session
-- A live session seen again: its operator, role and CSRF token.  Idle for
-- more than :idle_seconds, past its expiry, or its operator disabled: nothing.
UPDATE console_sessions SET last_seen_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE token_hash = :token_hash
  AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  AND last_seen_at > strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') - :idle_seconds / 86400.0)
  AND EXISTS (SELECT 1 FROM operators o WHERE o.name = console_sessions.operator
              AND o.disabled_at IS NULL)
RETURNING operator, (SELECT role FROM operators o WHERE o.name = console_sessions.operator) AS role,
          csrf, expires_at;

-- name: delete_console_session
-- Sign out.
DELETE FROM console_sessions WHERE token_hash = :token_hash;

-- name: delete_operator_sessions
-- Every session of one operator (disabled, or a password reset).
DELETE FROM console_sessions WHERE operator = :name;

-- name: delete_expired_console_sessions
-- Sessions past their expiry.
DELETE FROM console_sessions WHERE expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now');

-- name: insert_sign_in_attempt
-- An attempt about to be checked; committed before the throttle counts, so
-- that concurrent attempts (from any console process) see each other.
INSERT INTO sign_in_attempts (operator, address, outcome) VALUES (:operator, :address, 'pending')
RETURNING id;

-- name: count_sign_in_failures
-- Failed and in-flight attempts in the last :window_seconds by the database
-- clock, per name and per address.
SELECT
    (SELECT count(*) FROM sign_in_attempts
     WHERE operator = :operator AND outcome IN ('pending', 'refused')
       AND last_at > strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') - :window_seconds / 86400.0))
        AS by_operator,
    (SELECT count(*) FROM sign_in_attempts
     WHERE address = :address AND outcome IN ('pending', 'refused')
       AND last_at > strftime('%Y-%m-%dT%H:%M:%fZ', julianday('now') - :window_seconds / 86400.0))
        AS by_address;

-- name: settle_sign_in_attempt
-- A pending attempt's outcome: accepted, refused, or throttled.
UPDATE sign_in_attempts SET outcome = :outcome, last_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id = :id AND outcome = 'pending';

-- name: count_throttled_sign_in
-- Another throttled attempt on the window's row for this name and address,
-- if there is one (then the new attempt's own row goes).
UPDATE sign_in_attempts SET attempts = attempts + 1,
                            last_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id = (SELECT id FROM sign_in_attempts
            WHERE operator = :operator AND address = :address AND outcome = 'throttled'
              AND first_at > strftime('%Y-%m-%dT%H:%M:%fZ',
                                      julianday('now') - :window_seconds / 86400.0)
            ORDER BY id DESC LIMIT 1)
RETURNING id;

-- name: delete_pending_sign_in_attempt
-- The new attempt's row, counted on the window's throttled row instead.
DELETE FROM sign_in_attempts WHERE id = :id AND outcome = 'pending';

-- name: list_sign_in_attempts
-- The latest attempts, newest first; :outcome NULL for every outcome.
SELECT id, operator, address, outcome, attempts, first_at, last_at FROM sign_in_attempts
WHERE (:outcome IS NULL OR outcome = :outcome)
ORDER BY last_at DESC, id DESC
LIMIT :limit;
