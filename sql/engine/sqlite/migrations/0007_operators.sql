-- 0007: the console's operators and their sessions.  An operator signs in
-- with a password (stored only as an argon2 hash); the audit trail names the
-- signed-in operator, never free text typed into a form.  A session is a
-- random token the browser holds; only its SHA-256 is stored, with the
-- session's CSRF token and its expiry by the database clock.
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
