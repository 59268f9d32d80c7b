-- How each contract ended: enrolled (signed) or withdrawn, and when.
ALTER TABLE enrollment_contracts ADD COLUMN outcome text;
ALTER TABLE enrollment_contracts ADD COLUMN closed_at timestamptz;
ALTER TABLE enrollment_contracts ADD CONSTRAINT enrollment_contracts_outcome_known
    CHECK (outcome IS NULL OR outcome IN ('enrolled', 'withdrawn'));
