-- A fleet import arrives in chunks (operator command fleet.import: a 12,500-node file does not
-- fit one NATS message). Each chunk is staged here, validated, until the last one arrives; then
-- every node is written in one transaction (all or nothing), the chunks deleted and the import
-- recorded, with the identity that asked, so that a late copy of a chunk changes nothing.
CREATE TABLE import_chunks (
    import_id  uuid        NOT NULL,
    chunk      integer     NOT NULL CHECK (chunk >= 0),
    chunks     integer     NOT NULL CHECK (chunks > chunk),
    nodes      jsonb       NOT NULL,
    staged_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (import_id, chunk)
);

CREATE TABLE imports (
    import_id    uuid        PRIMARY KEY,
    identity     text        NOT NULL,
    chunks       integer     NOT NULL,
    nodes        integer     NOT NULL,
    added        integer     NOT NULL,
    updated      integer     NOT NULL,
    unchanged    integer     NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);
