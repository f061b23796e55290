-- Operator commands this service ran or refused (lockstep_common.operator): its audit of who
-- asked what, and what makes a write idempotent. A command's effects and its row commit in one
-- transaction, so a request id retried after a lost reply gets the stored reply and changes
-- nothing twice. Read commands change nothing and are not recorded.
CREATE TABLE operator_requests (
    request_id  uuid        PRIMARY KEY,           -- the request envelope's id
    identity    text        NOT NULL,              -- the NATS identity the server let ask
    command     text        NOT NULL,              -- e.g. fleet.remove
    digest      text        NOT NULL,              -- sha256 of the request's data
    request     jsonb       NOT NULL,              -- the request's data, for the audit
    outcome     text        NOT NULL CHECK (outcome IN ('done', 'refused')),
    reason      text,                              -- why it was refused
    reply       bytea       NOT NULL,              -- the reply envelope sent, sent again on retry
    asked_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operator_requests_asked ON operator_requests (asked_at);
