-- The enrollment's own ledger: one row per contract that left for signature,
-- written in the transaction that moves the enrollment to contract_sent.
CREATE TABLE enrollment_contracts (
    saga_id       TEXT PRIMARY KEY REFERENCES sagas (id),
    contract_key  TEXT NOT NULL UNIQUE,
    signer        TEXT NOT NULL,
    sent_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
