-- 0012: console sign-in attempts, for throttling and audit.  Every attempt
-- that reaches the password check is a row (pending while it is checked,
-- then accepted or refused); attempts refused by the throttle are counted
-- on one row per name and address and window, so a flood of them does not
-- grow the table.  The throttle counts failures by the database clock, so
-- every console process shares it.  `saga prune` removes old rows.
CREATE TABLE sign_in_attempts (
    id        bigserial PRIMARY KEY,
    operator  text NOT NULL,
    address   text NOT NULL,
    outcome   text NOT NULL,
    attempts  integer NOT NULL DEFAULT 1,
    first_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT sign_in_attempts_outcome_known
        CHECK (outcome IN ('pending', 'accepted', 'refused', 'throttled'))
);
CREATE INDEX sign_in_attempts_by_operator ON sign_in_attempts (operator, last_at);
CREATE INDEX sign_in_attempts_by_address ON sign_in_attempts (address, last_at);
CREATE INDEX sign_in_attempts_by_time ON sign_in_attempts (last_at);
