-- Which migrations a database has; created before anything else by `saga db upgrade`.
CREATE TABLE IF NOT EXISTS saga_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
