-- 0002: the example consumer's projection (`saga consume sales`): each
-- purchase's latest state as its events told it, whatever order and however
-- often they arrived.  It lives apart from the engine's own records and is
-- compared with them, never used by them.
CREATE TABLE sales_projection (
    purchase_id   text PRIMARY KEY,
    intensive_id  text NOT NULL,
    state         text NOT NULL,
    saga_version  integer NOT NULL,
    amount_minor  bigint NOT NULL,
    currency      text NOT NULL,
    occurred_at   timestamptz NOT NULL
);
CREATE INDEX sales_projection_by_intensive ON sales_projection (intensive_id, state);
