-- Health samples (a time series, partitioned by day), the waves being gated, and their verdicts.

-- One reading of one signal on one node (lockstep_healthgate.domain.signals names the signals).
-- Declarative range partitions of one UTC day each: the service creates them ahead and drops
-- those past the retention (adapters/partitions.py), so old samples go by DROP, not DELETE.
-- value NaN: the report did not carry a counter (the policy's missing-value rule decides).
CREATE TABLE health_samples (
    observed_at timestamptz      NOT NULL,
    node_id     text             NOT NULL,
    metric      text             NOT NULL,
    value       double precision NOT NULL
) PARTITION BY RANGE (observed_at);
CREATE INDEX health_samples_node_time ON health_samples (node_id, observed_at);

CREATE TABLE waves (
    rollout_id   text        NOT NULL,
    wave         integer     NOT NULL,
    state        text        NOT NULL CHECK (state IN ('updating', 'soaking', 'decided', 'closed')),
    planned_at   timestamptz NOT NULL,
    completed_at timestamptz,
    soak_seconds integer     NOT NULL CHECK (soak_seconds >= 0),
    lease_token  bigint      NOT NULL DEFAULT 0,      -- fencing token: bumped on every claim
    lease_until  timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (rollout_id, wave)
);
CREATE INDEX waves_soaking ON waves (completed_at) WHERE state = 'soaking';

-- Canary (updated by the wave) and control nodes, per stratum (wave.planned's strata).
CREATE TABLE wave_members (
    rollout_id text    NOT NULL,
    wave       integer NOT NULL,
    node_id    text    NOT NULL,
    stratum    text    NOT NULL,
    canary     boolean NOT NULL,
    PRIMARY KEY (rollout_id, wave, node_id),
    FOREIGN KEY (rollout_id, wave) REFERENCES waves (rollout_id, wave)
);
CREATE INDEX wave_members_node ON wave_members (node_id);

-- One verdict per wave: the audit record, never updated. decision is the judge's GateDecision
-- (every metric and rule with its evidence); with the samples of the window and the policy
-- (policy_digest), it re-derives the verdict.
CREATE TABLE verdicts (
    rollout_id    text        NOT NULL,
    wave          integer     NOT NULL,
    verdict       text        NOT NULL CHECK (verdict IN ('passed', 'tripped', 'inconclusive')),
    kind          text        NOT NULL CHECK (kind IN ('hard_rule', 'soak')),
    reason        text        NOT NULL,
    decision      jsonb       NOT NULL,
    evaluated_at  timestamptz NOT NULL,
    window_start  timestamptz NOT NULL,
    window_end    timestamptz NOT NULL,
    policy_digest text        NOT NULL,
    event_id      uuid        NOT NULL,
    decided_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rollout_id, wave),
    FOREIGN KEY (rollout_id, wave) REFERENCES waves (rollout_id, wave)
);
