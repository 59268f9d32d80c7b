-- The purchase saga's own rows.
-- PostgreSQL; sql/sqlite/queries/purchases.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.

-- name: insert_purchase
-- The purchase's own row, its seat not yet counted.
INSERT INTO purchases (saga_id, intensive_id, student_id, amount_minor, currency, seat)
VALUES (:saga_id, :intensive_id, :student_id, :amount_minor, :currency, :seat);

-- name: purchase_seat
-- Where a purchase's seat is, locked with the saga's transaction.
SELECT intensive_id, seat FROM purchases WHERE saga_id = :saga_id FOR UPDATE;

-- name: set_purchase_seat
-- Compare-and-set the seat of one purchase.
UPDATE purchases SET seat = :to_seat
WHERE saga_id = :saga_id AND seat = :from_seat;

-- name: get_purchase
-- One purchase with its saga and operation id.
SELECT s.id, o.operation_id, p.intensive_id, p.student_id, p.amount_minor, p.currency, p.seat,
       s.state, s.version, s.data, s.deadline_at, s.deadline_event, s.created_at, s.updated_at
FROM purchases p
JOIN sagas s ON s.id = p.saga_id
LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE p.saga_id = :saga_id;

-- name: list_purchases
-- Purchases, newest first, optionally of one state and one intensive.
SELECT s.id, o.operation_id, p.intensive_id, p.student_id, p.amount_minor, p.currency, p.seat,
       s.state, s.version, s.data, s.deadline_at, s.deadline_event, s.created_at, s.updated_at
FROM purchases p
JOIN sagas s ON s.id = p.saga_id
LEFT JOIN saga_operations o ON o.saga_id = s.id
WHERE (CAST(:state AS text) IS NULL OR s.state = :state)
  AND (CAST(:intensive_id AS text) IS NULL OR p.intensive_id = :intensive_id)
ORDER BY s.created_at DESC, s.id COLLATE "C" DESC
LIMIT :limit;

-- name: seat_ledger
-- Per intensive: the counters and what the purchases' own seats add up to.
SELECT i.id, i.capacity, i.held, i.taken,
       count(p.saga_id) FILTER (WHERE p.seat = 'held') AS purchases_held,
       count(p.saga_id) FILTER (WHERE p.seat = 'taken') AS purchases_taken
FROM intensives i
LEFT JOIN purchases p ON p.intensive_id = i.id
GROUP BY i.id, i.capacity, i.held, i.taken
ORDER BY i.id;

-- name: student_seat
-- The purchase through which a student holds or has a seat of an intensive, if any.
SELECT saga_id FROM purchases
WHERE intensive_id = :intensive_id AND student_id = :student_id AND seat <> 'free';
