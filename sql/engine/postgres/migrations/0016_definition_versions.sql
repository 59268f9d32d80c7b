-- 0016: definition versions.  A saga runs on the definition it started with
-- until it ends or is migrated (`saga migrate apply`), so:
-- * each audit row records the definition version it was made under
--   (verify reads each transition against its own definition, and an event
--   declared since a version is expected only from then on).  Existing rows
--   were all made under their saga's current version: no saga could change
--   version before this migration.  NULL (a worker of the previous release
--   writing after this upgrade) reads as the saga's current version.
-- * `finished_at` says a saga reached a terminal state, set by the transition
--   that enters one.  The database cannot tell which states are terminal (the
--   machines live in the application's code): the engine marks existing rows
--   when it opens an application that registers their definition, and until
--   then a saga counts as live: the retirement check errs on refusing.  The
--   partial index serves the live counts per version that check reads, and
--   a migration's batches, which walk one version's live sagas in id order.
ALTER TABLE sagas ADD COLUMN finished_at timestamptz;
CREATE INDEX sagas_live ON sagas (kind, definition_version, id, state) WHERE finished_at IS NULL;
ALTER TABLE saga_transitions ADD COLUMN definition_version integer;
-- The audit is append-only; its backfill is the one update it ever gets.
ALTER TABLE saga_transitions DISABLE TRIGGER saga_transitions_no_update_or_delete;
UPDATE saga_transitions t SET definition_version = s.definition_version
FROM sagas s WHERE s.id = t.saga_id;
ALTER TABLE saga_transitions ENABLE TRIGGER saga_transitions_no_update_or_delete;
