-- 0013: what a sender can make the engine store at its door is bounded.
-- Each refused request adds one to its hour's count per provider and reason
-- (a provider the application does not know is counted as '(unknown)', so a
-- sender cannot add a row per made-up name), and only the newest refusals
-- are kept whole in inbox_refusals (the door trims it to its sample size).
CREATE TABLE inbox_refusal_counts (
    hour     TEXT NOT NULL,
    source   TEXT NOT NULL,
    reason   TEXT NOT NULL,
    n        INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    last_at  TEXT NOT NULL,
    PRIMARY KEY (hour, source, reason)
) STRICT;
