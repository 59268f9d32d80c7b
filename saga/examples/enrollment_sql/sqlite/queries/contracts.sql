-- The enrollment's named queries; prefixed with its name, as the engine's share one namespace.

-- name: enrollment_contract_sent
-- Record a contract that left for signature (again: nothing changes).
INSERT INTO enrollment_contracts (saga_id, contract_key, signer)
VALUES (:saga_id, :contract_key, :signer)
ON CONFLICT (saga_id) DO NOTHING;

-- name: enrollment_contract_closed
-- Record how a contract ended, once.
UPDATE enrollment_contracts SET outcome = :outcome, closed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE saga_id = :saga_id AND outcome IS NULL;

-- name: enrollment_contracts_sent
-- How many contracts left, by outcome (open ones have none).
SELECT coalesce(outcome, 'open') AS outcome, count(*) AS contracts
FROM enrollment_contracts GROUP BY coalesce(outcome, 'open') ORDER BY 1;

-- name: enrollment_ledger_gaps
-- Enrollments whose ledger disagrees with their state: a sent or signed contract
-- with no row, or an ended enrollment whose row says otherwise.
SELECT s.id, s.state, c.outcome
FROM sagas s LEFT JOIN enrollment_contracts c ON c.saga_id = s.id
WHERE s.kind = 'enrollment' AND (
    (s.state IN ('contract_sent', 'enrolled') AND c.saga_id IS NULL)
    OR (s.state IN ('enrolled', 'withdrawn') AND c.saga_id IS NOT NULL
        AND (c.outcome IS NULL OR c.outcome <> s.state))
)
ORDER BY s.id;
