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
