-- 0010: one saga's events found by an index whether published or not (the
-- console's saga page and `saga instances events` listed them by scanning
-- the whole outbox: 54 ms with 300,000 events).  The relay keeps its own
-- partial index (outbox_unpublished): with only this one, PostgreSQL could
-- combine it with outbox_due for the relay's "oldest unpublished event of
-- the saga" check and spend seconds per claim on a bloated outbox.
CREATE INDEX outbox_saga ON outbox (saga_id, id);
