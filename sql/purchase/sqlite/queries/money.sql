-- Money that moved outside the provider, recorded by operators with its trace.
-- SQLite; sql/purchase/postgres/queries/money.sql defines the same names.

-- name: insert_external_movement
-- Money that moved outside the provider, with its trace.
INSERT INTO external_movements (saga_id, item_id, direction, reference, amount_minor, currency,
                                operator, reason)
VALUES (:saga_id, :item_id, :direction, :reference, :amount_minor, :currency, :operator, :reason);

-- name: external_movements_of_saga
-- The money a saga moved outside the provider.
SELECT direction, reference, amount_minor, currency, operator, reason, at
FROM external_movements WHERE saga_id = :saga_id ORDER BY id;

-- name: external_movement_by_reference
-- One external movement, by its reference.
SELECT saga_id, direction, reference, amount_minor, currency FROM external_movements
WHERE reference = :reference;

-- name: money_of_purchases
-- Each purchase's money among :ids (a JSON array of saga ids): the price, the
-- state, who and what, charged and refunded at the provider.
SELECT p.saga_id, p.student_id, p.intensive_id, p.amount_minor, p.currency, s.state,
       CASE WHEN pay.status = 'succeeded' THEN coalesce(pay.charged_minor, 0) ELSE 0 END
           AS charged_minor,
       pay.charged_currency,
       CASE WHEN r.status = 'succeeded' THEN r.amount_minor ELSE 0 END AS refunded_minor
FROM purchases p
JOIN sagas s ON s.id = p.saga_id
LEFT JOIN payments pay ON pay.saga_id = p.saga_id
LEFT JOIN refunds r ON r.saga_id = p.saga_id
WHERE p.saga_id IN (SELECT value FROM json_each(:ids));

-- name: external_movements_of_sagas
-- The money moved outside the provider by the sagas among :ids (a JSON array).
SELECT saga_id, direction, reference, amount_minor, currency, operator, reason, at
FROM external_movements WHERE saga_id IN (SELECT value FROM json_each(:ids)) ORDER BY id;
