-- Which of the engine's migrations a database has; created before anything else by `saga db upgrade`.
CREATE TABLE IF NOT EXISTS saga_migrations (
    version     INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    checksum    TEXT NOT NULL,
    applied_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- Which migrations of each application's SQL component a database has
-- (the engine's own stay in saga_migrations, where they always were).
CREATE TABLE IF NOT EXISTS saga_component_migrations (
    component   TEXT NOT NULL,
    version     INTEGER NOT NULL,
    name        TEXT NOT NULL,
    checksum    TEXT NOT NULL,
    applied_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (component, version)
);
