-- The planner's own state: attested bundles (from bundle.attested), intents (one row per intent
-- id, however often it is delivered), rollouts and their waves with their states
-- (domain/rollout.py), device steps seen per node, operator commands, and the audit trail.

CREATE TABLE bundles (
    stack_hash     text        PRIMARY KEY,
    bundle_id      text        NOT NULL,
    bundle_version text        NOT NULL,
    bundle_uri     text,
    components     jsonb       NOT NULL,
    attested_at    timestamptz NOT NULL
);
CREATE INDEX bundles_by_name ON bundles (bundle_id, bundle_version);

CREATE TABLE intents (
    intent_id     uuid        PRIMARY KEY,            -- a redelivered or resent intent adds none
    event_id      uuid        NOT NULL,
    rollout_id    text        NOT NULL UNIQUE,
    payload       jsonb       NOT NULL,               -- the IntentSubmitted data, as sent
    submitted_by  text        NOT NULL,
    state         text        NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'planning', 'planned', 'refused')),
    reasons       text[]      NOT NULL DEFAULT '{}',
    attempts      integer     NOT NULL DEFAULT 0,
    lease_token   bigint      NOT NULL DEFAULT 0,     -- fencing token: bumped on every claim
    lease_until   timestamptz,
    received_at   timestamptz NOT NULL,
    decided_at    timestamptz
);
CREATE INDEX intents_open ON intents (received_at) WHERE state IN ('pending', 'planning');

CREATE TABLE rollouts (
    rollout_id     text        PRIMARY KEY,
    intent_id      uuid        NOT NULL UNIQUE REFERENCES intents (intent_id),
    stack_hash     text        NOT NULL,
    change_class   text        NOT NULL,
    scope          jsonb       NOT NULL,
    dry_run        boolean     NOT NULL,
    state          text        NOT NULL
                   CHECK (state IN ('planned', 'running', 'paused', 'halted', 'aborted', 'completed')),
    plan_hash      text        NOT NULL,
    plan           jsonb       NOT NULL,              -- waves, strata, exclusions, estimates
    approvals      text[]      NOT NULL DEFAULT '{}',   -- approver per counted approval
    signatures     text[]      NOT NULL DEFAULT '{}',   -- their signatures, to refuse replays
    approvals_needed integer   NOT NULL,
    reason         text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);

CREATE TABLE waves (
    rollout_id      text        NOT NULL REFERENCES rollouts (rollout_id),
    number          integer     NOT NULL,
    state           text        NOT NULL CHECK (state IN ('pending', 'released', 'soaking',
                        'held', 'passed', 'tripped', 'timed_out', 'cancelled')),
    node_ids        text[]      NOT NULL,
    components      text[]      NOT NULL,
    max_unavailable integer     NOT NULL,
    failure_budget  integer     NOT NULL,
    soak_s          integer     NOT NULL,
    planned_s       integer     NOT NULL,             -- estimated work, for the deadline
    strata          jsonb       NOT NULL,
    gate_passed     boolean     NOT NULL DEFAULT false,
    succeeded       integer     NOT NULL DEFAULT 0,
    failed          integer     NOT NULL DEFAULT 0,
    released_at     timestamptz,
    deadline        timestamptz,
    soak_until      timestamptz,
    PRIMARY KEY (rollout_id, number)
);
-- The timer worker's two questions: whose soak is over, whose deadline has passed.
CREATE INDEX waves_due ON waves (soak_until) WHERE state = 'soaking' AND gate_passed;
CREATE INDEX waves_deadline ON waves (deadline) WHERE state = 'released';

-- Which rollout holds which node: two live rollouts may not claim the same node.
CREATE TABLE rollout_nodes (
    node_id    text NOT NULL,
    rollout_id text NOT NULL REFERENCES rollouts (rollout_id),
    wave       integer NOT NULL,
    step       text,                                   -- the last device.* step seen
    step_at    timestamptz,
    PRIMARY KEY (rollout_id, node_id)
);
CREATE INDEX rollout_nodes_node ON rollout_nodes (node_id);

-- approve, pause, resume, abort: written by `lockstep rollout`, carried out by the planner's
-- worker (an approval carries its signed record in `approval`).
CREATE TABLE commands (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rollout_id   text        NOT NULL,
    action       text        NOT NULL CHECK (action IN ('approve', 'pause', 'resume', 'abort')),
    requested_by text        NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    approval     jsonb,
    requested_at timestamptz NOT NULL DEFAULT now(),
    done_at      timestamptz,
    outcome      text
);
CREATE INDEX commands_open ON commands (id) WHERE done_at IS NULL;

-- Every decision: who, what, when, why. Append-only: the trigger refuses updates and deletes.
CREATE TABLE audit (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rollout_id text        NOT NULL,
    at         timestamptz NOT NULL,
    actor      text        NOT NULL,
    action     text        NOT NULL,
    detail     text        NOT NULL
);
CREATE INDEX audit_rollout ON audit (rollout_id, id);

CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only';
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
