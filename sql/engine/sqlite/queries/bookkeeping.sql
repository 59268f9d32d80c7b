-- Schema bookkeeping and the database clock.
-- SQLite; sql/engine/postgres/queries/bookkeeping.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.
-- Write transactions start with BEGIN IMMEDIATE: they hold the write lock from
-- their first statement, so no FOR UPDATE is needed.

-- name: lock_migrations
-- Nothing to do: BEGIN IMMEDIATE already serializes `saga db upgrade` runs.
SELECT :key;

-- name: migrations_table_exists
-- Whether saga_migrations exists.
SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'saga_migrations';

-- name: has_engine_tables
-- Whether the engine's tables exist (a schema created before tracking began).
SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'sagas';

-- name: schema_version
-- The highest applied migration.
SELECT coalesce(max(version), 0) FROM saga_migrations;

-- name: applied_migrations
-- Every applied migration with its checksum.
SELECT version, name, checksum FROM saga_migrations ORDER BY version;

-- name: record_migration
-- Mark one migration applied.
INSERT INTO saga_migrations (version, name, checksum) VALUES (:version, :name, :checksum);

-- name: component_migrations_table_exists
-- Whether saga_component_migrations exists (databases older than components lack it).
SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'saga_component_migrations';

-- name: component_version
-- The highest applied migration of one SQL component.
SELECT coalesce(max(version), 0) FROM saga_component_migrations WHERE component = :component;

-- name: applied_component_migrations
-- Every applied migration of one SQL component, with its checksum.
SELECT version, name, checksum FROM saga_component_migrations
WHERE component = :component ORDER BY version;

-- name: record_component_migration
-- Mark one migration of a SQL component applied.
INSERT INTO saga_component_migrations (component, version, name, checksum)
VALUES (:component, :version, :name, :checksum);

-- name: db_now
-- The database clock, which decides leases and deadlines.
SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now');

-- name: db_now_epoch
-- The database clock in unix seconds (a signed webhook's timestamp is judged by it).
SELECT (julianday('now') - 2440587.5) * 86400.0;
