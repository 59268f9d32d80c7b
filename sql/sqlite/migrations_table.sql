-- Which migrations a database has; created before anything else by `saga db upgrade`.
CREATE TABLE IF NOT EXISTS saga_migrations (
    version     INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    checksum    TEXT NOT NULL,
    applied_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
