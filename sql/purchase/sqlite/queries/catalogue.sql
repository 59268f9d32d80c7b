-- The catalogue: intensives and their seat counters.
-- SQLite; sql/purchase/postgres/queries/catalogue.sql defines the same names, and values
-- are always bound (:name), never formatted into the text.
-- Write transactions start with BEGIN IMMEDIATE: they hold the write lock from
-- their first statement, so no FOR UPDATE is needed.

-- name: insert_intensive
-- Add an intensive with every seat free; nothing if the id exists.
INSERT INTO intensives (id, capacity, price_minor, currency)
VALUES (:id, :capacity, :price_minor, :currency)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: get_intensive
-- One intensive with its seat counters.
SELECT id, capacity, price_minor, currency, held, taken, created_at
FROM intensives WHERE id = :id;

-- name: list_intensives
-- Intensives in id order, after a cursor.
SELECT id, capacity, price_minor, currency, held, taken, created_at
FROM intensives
WHERE id > :after
ORDER BY id
LIMIT :limit;

-- name: move_seats
-- Shift seat counters by the deltas if every counter stays in range:
-- a conditional update, so two buyers can never take the same last seat.
UPDATE intensives
SET held = held + :held_delta, taken = taken + :taken_delta
WHERE id = :id
  AND held + :held_delta >= 0
  AND taken + :taken_delta >= 0
  AND held + taken + :held_delta + :taken_delta <= capacity
RETURNING id;
