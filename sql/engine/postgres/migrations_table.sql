-- Which of the engine's migrations a database has; created before anything else by `saga db upgrade`.
CREATE TABLE IF NOT EXISTS saga_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Which migrations of each application's SQL component a database has
-- (the engine's own stay in saga_migrations, where they always were).
CREATE TABLE IF NOT EXISTS saga_component_migrations (
    component   text NOT NULL,
    version     integer NOT NULL,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (component, version)
);
