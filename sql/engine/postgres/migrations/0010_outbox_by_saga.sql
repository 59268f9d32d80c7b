-- 0010: one saga's events found by an index whether published or not (the
-- console's saga page and `saga instances events` listed them by scanning
-- the whole outbox: 54 ms with 300,000 events).  It also serves the relay's
-- "oldest unpublished event of the saga" check (a saga has a few events),
-- so the partial index that served only that goes.
CREATE INDEX outbox_saga ON outbox (saga_id, id);
DROP INDEX outbox_unpublished;
