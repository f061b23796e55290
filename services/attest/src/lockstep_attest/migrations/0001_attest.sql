-- Attestation jobs, verdicts with every check, and the stacks pinned elsewhere (for
-- anti-rollback). Verdicts are the audit record: never updated, never deleted.

CREATE TABLE jobs (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id       uuid        NOT NULL UNIQUE,       -- the bundle.submitted event
    bundle_uri     text        NOT NULL,
    submitted_by   text        NOT NULL,
    correlation_id text,
    state          text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'done')),
    attempts       integer     NOT NULL DEFAULT 0,
    lease_token    bigint      NOT NULL DEFAULT 0,    -- fencing token: bumped on every claim
    lease_until    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    verdict_id     bigint
);
CREATE INDEX jobs_open ON jobs (id) WHERE state <> 'done';

CREATE TABLE verdicts (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         bigint      REFERENCES jobs (id),
    bundle_digest  text        NOT NULL,              -- SHA-256 over every file's path + SHA-384
    context_digest text        NOT NULL,              -- policy, trust store and pinned stack
    bundle_uri     text        NOT NULL,
    submitted_by   text        NOT NULL,
    bundle_id      text,
    bundle_version text,
    stack_hash     text,
    accepted       boolean     NOT NULL,
    reused_from    bigint      REFERENCES verdicts (id),
    manifest       jsonb,
    read_ms        double precision NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX verdicts_reuse ON verdicts (bundle_digest, context_digest, finished_at DESC);
CREATE INDEX verdicts_stack ON verdicts (stack_hash) WHERE accepted;

CREATE TABLE verdict_checks (
    verdict_id  bigint  NOT NULL REFERENCES verdicts (id),
    position    integer NOT NULL,
    check_name  text    NOT NULL,
    result      text    NOT NULL CHECK (result IN ('pass', 'fail')),
    reason      text    NOT NULL,
    duration_ms double precision NOT NULL,
    PRIMARY KEY (verdict_id, position)
);

CREATE TABLE pinned (
    stack_hash text        NOT NULL,
    site       text        NOT NULL,
    pinned_at  timestamptz NOT NULL,
    PRIMARY KEY (stack_hash, site)
);
