-- 0002: the money and fencing witnesses of issue 7.

-- Fencing witnesses.  A write made inside a job's fenced transaction names
-- the job, and the database records, in the same statement, whether that
-- job's lease (token and expiry) was still valid at that moment.  `saga
-- verify` counts the writes that were not: there must be none.
ALTER TABLE saga_transitions ADD COLUMN job_id TEXT;
ALTER TABLE saga_transitions ADD COLUMN lease_valid INTEGER
    CONSTRAINT saga_transitions_lease_valid_bool CHECK (lease_valid IN (0, 1));
ALTER TABLE payments ADD COLUMN stale_writes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE refunds ADD COLUMN stale_writes INTEGER NOT NULL DEFAULT 0;

-- Money that moved outside the provider (a bank transfer), recorded by an
-- operator with its trace when resolving a reconciliation item.  `verify`
-- counts it like provider money: direction 'in' is money received, 'out'
-- money given back.
CREATE TABLE external_movements (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id       TEXT NOT NULL REFERENCES sagas (id),
    item_id       TEXT NOT NULL REFERENCES recon_items (id),
    direction     TEXT NOT NULL,
    reference     TEXT NOT NULL UNIQUE,
    amount_minor  INTEGER NOT NULL,
    currency      TEXT NOT NULL,
    operator      TEXT NOT NULL,
    reason        TEXT NOT NULL,
    at            TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT external_movements_direction_known CHECK (direction IN ('in', 'out')),
    CONSTRAINT external_movements_amount_positive CHECK (amount_minor > 0)
) STRICT;
CREATE INDEX external_movements_by_saga ON external_movements (saga_id);

-- Reconciliation items are of two kinds: an 'outcome' item holds a saga in
-- needs_reconciliation until it is resolved (one open per saga); a 'review'
-- item is evidence for a human (an event that contradicts the provider) and
-- holds nothing.  overdue_at: when the item passed its deadline unresolved
-- and was escalated for it.
ALTER TABLE recon_items ADD COLUMN kind TEXT NOT NULL DEFAULT 'outcome'
    CONSTRAINT recon_items_kind_known CHECK (kind IN ('outcome', 'review'));
ALTER TABLE recon_items ADD COLUMN overdue_at TEXT;
DROP INDEX recon_items_one_open_per_saga;
CREATE UNIQUE INDEX recon_items_one_open_per_saga ON recon_items (saga_id)
    WHERE status = 'open' AND kind = 'outcome';
CREATE INDEX recon_items_deadline ON recon_items (deadline) WHERE status = 'open';

-- What the provider said when an event arrived, and how the event's own
-- payload compared with it: an event is a hint, the provider is the truth.
ALTER TABLE inbox ADD COLUMN evidence TEXT
    CONSTRAINT inbox_evidence_json CHECK (evidence IS NULL OR json_valid(evidence));
