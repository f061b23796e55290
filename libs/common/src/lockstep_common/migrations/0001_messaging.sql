-- Outbox, inbox and dead letters: created in every service's own schema (search_path is set
-- to it by the migration runner), so no service ever reads another's tables.

-- Transactional outbox (microservices.io "Transactional outbox"): events are written here in the
-- same transaction as the state change that caused them; the relay publishes them with
-- Nats-Msg-Id = event_id and marks them published.
CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid        NOT NULL UNIQUE,
    subject         text        NOT NULL,          -- logical subject, namespaced by the relay
    payload         bytea       NOT NULL,
    headers         jsonb,                         -- extra NATS headers (dead letters)
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text
);
CREATE INDEX outbox_pending ON outbox (next_attempt_at, id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Wake the relay on commit; NOTIFY is transactional and folds duplicates within a transaction.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- Inbox (idempotent consumer): a consumer applies an event only if it can insert its id here
-- in the transaction that applies it.
CREATE TABLE inbox (
    consumer    text        NOT NULL,
    event_id    uuid        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX inbox_received ON inbox (received_at);

-- Dead letters: JetStream has none of its own (reliability.md 1.3).
CREATE TABLE dead_letters (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer    text        NOT NULL,
    stream      text        NOT NULL,
    stream_seq  bigint      NOT NULL,
    subject     text        NOT NULL,              -- logical subject of the original
    payload     bytea,                             -- NULL when the original had already expired
    reason      text        NOT NULL,
    error_kind  text        NOT NULL,
    deliveries  integer     NOT NULL,
    detected_by text        NOT NULL CHECK (detected_by IN ('consumer', 'advisory')),
    failed_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (stream, stream_seq, consumer)
);
