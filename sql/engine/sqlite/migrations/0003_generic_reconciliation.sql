-- 0003: reconciliation items of any application.  An item's subject is the
-- application's word (a payment, a refund, a signature…), no longer a fixed
-- list.  SQLite cannot drop a CHECK: the table is rebuilt, its rows and ids
-- kept (the foreign keys pointing at it are checked when the migration commits).

PRAGMA defer_foreign_keys = ON;
CREATE TEMP TABLE recon_items_before AS SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts, max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution, resolved_by, resolution_reason, kind, overdue_at FROM recon_items;
DROP TABLE recon_items;
CREATE TABLE recon_items (
    id                 TEXT PRIMARY KEY,
    saga_id            TEXT NOT NULL REFERENCES sagas (id),
    status             TEXT NOT NULL DEFAULT 'open',
    subject            TEXT NOT NULL,
    reason             TEXT NOT NULL,
    evidence           TEXT NOT NULL,
    owner              TEXT NOT NULL,
    next_check_at      TEXT,
    attempts           INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL,
    deadline           TEXT NOT NULL,
    escalated_at       TEXT,
    version            INTEGER NOT NULL DEFAULT 1,
    opened_at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    resolved_at        TEXT,
    resolution         TEXT,
    resolved_by        TEXT,
    resolution_reason  TEXT,
    kind               TEXT NOT NULL DEFAULT 'outcome'
        CONSTRAINT recon_items_kind_known CHECK (kind IN ('outcome', 'review')),
    overdue_at         TEXT,
    CONSTRAINT recon_items_evidence_json CHECK (json_valid(evidence)),
    CONSTRAINT recon_items_status_known CHECK (status IN ('open', 'resolved')),
    CONSTRAINT recon_items_open_has_a_next_check CHECK (
        status <> 'open' OR next_check_at IS NOT NULL
    ),
    CONSTRAINT recon_items_resolution_complete CHECK (
        (status = 'resolved') = (resolved_at IS NOT NULL AND resolution IS NOT NULL
                                 AND resolved_by IS NOT NULL)
    )
) STRICT;
INSERT INTO recon_items (id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts, max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution, resolved_by, resolution_reason, kind, overdue_at)
SELECT id, saga_id, status, subject, reason, evidence, owner, next_check_at, attempts, max_attempts, deadline, escalated_at, version, opened_at, resolved_at, resolution, resolved_by, resolution_reason, kind, overdue_at FROM recon_items_before;
DROP TABLE recon_items_before;
CREATE INDEX recon_items_open ON recon_items (opened_at) WHERE status = 'open';
CREATE UNIQUE INDEX recon_items_one_open_per_saga ON recon_items (saga_id)
    WHERE status = 'open' AND kind = 'outcome';
CREATE INDEX recon_items_deadline ON recon_items (deadline) WHERE status = 'open';
