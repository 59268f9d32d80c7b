-- 0006: requests refused at the inbox's door (an HTTP webhook unsigned,
-- mis-signed, replayed too late, malformed or for no known provider).  A
-- refusal changes no business state; it is kept so that operators see an
-- attack or a misconfigured secret.  Only a digest and the first bytes of
-- the body are kept: a refused body is untrusted.
CREATE TABLE inbox_refusals (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    source        TEXT NOT NULL,
    reason        TEXT NOT NULL,
    detail        TEXT NOT NULL,
    body_digest   TEXT NOT NULL,
    body_excerpt  TEXT NOT NULL,
    remote        TEXT,
    received_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
CREATE INDEX inbox_refusals_received ON inbox_refusals (received_at);
