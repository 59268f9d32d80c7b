-- Schema bookkeeping and the database clock.
-- PostgreSQL; sql/engine/sqlite/queries/bookkeeping.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.

-- name: lock_migrations
-- Serialize concurrent `saga db upgrade` runs until the transaction ends.
SELECT pg_advisory_xact_lock(:key);

-- name: migrations_table_exists
-- Whether saga_migrations exists in the current search_path.
SELECT to_regclass('saga_migrations') IS NOT NULL;

-- name: has_engine_tables
-- Whether the engine's tables exist (a schema created before tracking began).
SELECT to_regclass('sagas') IS NOT NULL;

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
SELECT to_regclass('saga_component_migrations') IS NOT NULL;

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
SELECT clock_timestamp();

-- name: db_now_epoch
-- The database clock in unix seconds (a signed webhook's timestamp is judged by it).
SELECT extract(epoch FROM clock_timestamp());
