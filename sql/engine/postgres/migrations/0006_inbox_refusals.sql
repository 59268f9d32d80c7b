-- 0006: requests refused at the inbox's door (an HTTP webhook unsigned,
-- mis-signed, replayed too late, malformed or for no known provider).  A
-- refusal changes no business state; it is kept so that operators see an
-- attack or a misconfigured secret.  Only a digest and the first bytes of
-- the body are kept: a refused body is untrusted.
CREATE TABLE inbox_refusals (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source        text NOT NULL,
    reason        text NOT NULL,
    detail        text NOT NULL,
    body_digest   text NOT NULL,
    body_excerpt  text NOT NULL,
    remote        text,
    received_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX inbox_refusals_received ON inbox_refusals (received_at);
