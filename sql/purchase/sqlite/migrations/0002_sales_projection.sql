-- 0002: the example consumer's projection (`saga consume sales`): each
-- purchase's latest state as its events told it, whatever order and however
-- often they arrived.  It lives apart from the engine's own records and is
-- compared with them, never used by them.
CREATE TABLE sales_projection (
    purchase_id   TEXT PRIMARY KEY,
    intensive_id  TEXT NOT NULL,
    state         TEXT NOT NULL,
    saga_version  INTEGER NOT NULL,
    amount_minor  INTEGER NOT NULL,
    currency      TEXT NOT NULL,
    occurred_at   TEXT NOT NULL
) STRICT;
CREATE INDEX sales_projection_by_intensive ON sales_projection (intensive_id, state);
