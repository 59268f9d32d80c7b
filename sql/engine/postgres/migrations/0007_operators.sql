-- 0007: the console's operators and their sessions.  An operator signs in
-- with a password (stored only as an argon2 hash); the audit trail names the
-- signed-in operator, never free text typed into a form.  A session is a
-- random token the browser holds; only its SHA-256 is stored, with the
-- session's CSRF token and its expiry by the database clock.
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
