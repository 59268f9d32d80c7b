-- 0008: the listing order of sagas (newest first, overall and per kind and
-- state) served by an index, so that the console's and `saga instances
-- list`'s pages cost the same with a long history as with none.  The new
-- per-kind index starts with (kind, state): it replaces sagas_kind_state.
CREATE INDEX sagas_newest ON sagas (created_at DESC, id DESC);
CREATE INDEX sagas_kind_state_newest ON sagas (kind, state, created_at DESC, id DESC);
DROP INDEX sagas_kind_state;
