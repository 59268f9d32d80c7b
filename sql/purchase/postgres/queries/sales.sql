-- The example consumer's projection: sales per intensive, from published events.

-- name: project_sale
-- Record a purchase's state as of its event, unless a newer one is recorded:
-- events may arrive twice or out of order, the newest version wins.
INSERT INTO sales_projection (purchase_id, intensive_id, state, saga_version, amount_minor,
                              currency, occurred_at)
VALUES (:purchase_id, :intensive_id, :state, :saga_version, :amount_minor, :currency,
        CAST(:occurred_at AS timestamptz))
ON CONFLICT (purchase_id) DO UPDATE
SET state = excluded.state, saga_version = excluded.saga_version,
    occurred_at = excluded.occurred_at
WHERE sales_projection.saga_version < excluded.saga_version;

-- name: projected_sales
-- Per intensive and currency: seats sold (purchases confirmed now), their
-- revenue in minor units, and purchases seen in any state.
SELECT intensive_id, currency,
       sum(CASE WHEN state = 'confirmed' THEN 1 ELSE 0 END) AS seats_sold,
       sum(CASE WHEN state = 'confirmed' THEN amount_minor ELSE 0 END) AS revenue_minor,
       count(*) AS purchases
FROM sales_projection
GROUP BY intensive_id, currency
ORDER BY intensive_id, currency;

-- name: recorded_sales
-- The same figures from the engine's own records: confirmed purchase sagas.
SELECT p.intensive_id, p.currency,
       sum(CASE WHEN s.state = 'confirmed' THEN 1 ELSE 0 END) AS seats_sold,
       sum(CASE WHEN s.state = 'confirmed' THEN p.amount_minor ELSE 0 END) AS revenue_minor,
       count(*) AS purchases
FROM purchases p JOIN sagas s ON s.id = p.saga_id
GROUP BY p.intensive_id, p.currency
ORDER BY p.intensive_id, p.currency;
