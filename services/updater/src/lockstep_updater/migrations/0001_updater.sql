-- The updater's state: approved plans, attested images, released waves, one work item per
-- node and rollout (a resumable step machine, domain/steps.py) and every step it took.

CREATE TABLE plans (
    rollout_id text        PRIMARY KEY,
    stack_hash text        NOT NULL,
    node_ids   text[]      NOT NULL,                  -- every node of the approved plan
    planned_at timestamptz NOT NULL DEFAULT now()
);

-- A halt may arrive for a rollout whose plan this service never saw: it is kept all the same.
CREATE TABLE halts (
    rollout_id text        PRIMARY KEY,
    reason     text        NOT NULL,
    halted_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bundles (
    stack_hash  text        PRIMARY KEY,
    bundle_uri  text,
    components  jsonb       NOT NULL,                 -- AttestedComponent, as in bundle.attested
    attested_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE waves (
    rollout_id      text        NOT NULL,
    wave            integer     NOT NULL,
    node_ids        text[]      NOT NULL,
    max_unavailable integer     NOT NULL,
    failure_budget  integer     NOT NULL,
    correlation_id  text,
    released_at     timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    PRIMARY KEY (rollout_id, wave)
);

CREATE TABLE node_work (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rollout_id     text        NOT NULL,
    wave           integer     NOT NULL,
    node_id        text        NOT NULL,
    components     text[]      NOT NULL,
    correlation_id text,
    state          text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'preflight', 'staging', 'cordoning', 'draining', 'activating', 'awaiting_bmc', 'verifying', 'uncordoning', 'done', 'cancelled', 'failed', 'quarantined')),
    pool           text        NOT NULL DEFAULT '',
    attempts       integer     NOT NULL DEFAULT 0,
    lease_token    bigint      NOT NULL DEFAULT 0,    -- fencing token: bumped on every claim
    lease_until    timestamptz,
    claimed_at     timestamptz,
    reason         text        NOT NULL DEFAULT '',
    progress       jsonb       NOT NULL DEFAULT '{}', -- what a re-run of a step must know
    updated_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (rollout_id, node_id)
);
CREATE INDEX node_work_open ON node_work (id)
    WHERE state NOT IN ('done', 'cancelled', 'failed', 'quarantined');
CREATE INDEX node_work_pool ON node_work (pool, state);
CREATE INDEX node_work_node ON node_work (node_id);

-- The audit record of every step: never updated, never deleted.
CREATE TABLE node_steps (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    work_id    bigint      NOT NULL REFERENCES node_work (id),
    node_id    text        NOT NULL,
    rollout_id text        NOT NULL,
    wave       integer     NOT NULL,
    step       text        NOT NULL,
    attempt    integer     NOT NULL,
    token      bigint      NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL DEFAULT now(),
    outcome    text        NOT NULL,
    reason     text        NOT NULL
);
CREATE INDEX node_steps_node ON node_steps (node_id, id);
