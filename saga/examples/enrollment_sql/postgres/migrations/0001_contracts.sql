-- The enrollment's own ledger: one row per contract that left for signature,
-- written in the transaction that moves the enrollment to contract_sent.
CREATE TABLE enrollment_contracts (
    saga_id       text PRIMARY KEY REFERENCES sagas (id),
    contract_key  text NOT NULL UNIQUE,
    signer        text NOT NULL,
    sent_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
