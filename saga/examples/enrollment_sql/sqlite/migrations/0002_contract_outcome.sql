-- How each contract ended: enrolled (signed) or withdrawn, and when.
ALTER TABLE enrollment_contracts ADD COLUMN outcome TEXT
    CHECK (outcome IS NULL OR outcome IN ('enrolled', 'withdrawn'));
ALTER TABLE enrollment_contracts ADD COLUMN closed_at TEXT;
