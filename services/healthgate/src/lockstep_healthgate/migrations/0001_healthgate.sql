-- Health samples (a time series, partitioned by day), the waves being gated, and their verdicts.

-- One health report: a column per signal (lockstep_healthgate.domain.signals names them), NULL
-- when the report did not carry it, NaN for a counter the report left out (the policy's
-- missing-value rule decides), and the XID counts by code. One row per report, not per reading:
-- at the design load (12,500 nodes every 10 s) that is 1,250 rows a second instead of ~18,000,
-- which is what keeps COPY and the index near the broker's pace. Readers unpivot to
-- (node, metric, value, time) rows (adapters/pg_store.py).
-- Declarative range partitions of one UTC day each: the service creates them ahead and drops
-- those past the retention (adapters/partitions.py), so old samples go by DROP, not DELETE.
CREATE TABLE health_samples (
    observed_at            timestamptz        NOT NULL,
    node_id                text               NOT NULL,
    dcgm_diag_passed       double precision,
    xid_nonfatal_count     double precision,
    nccl_busbw_gbps        double precision,
    nccl_expected_gbps     double precision,
    sm_clock_mhz           double precision,
    gpu_temperature_c      double precision,
    gpu_power_w            double precision,
    throttled              double precision,
    ecc_sbe_count          double precision,
    row_remap_pending      double precision,
    pcie_replay_count      double precision,
    nvlink_crc_error_count double precision,
    gsp_init_failed        double precision,
    heartbeat              double precision,
    device_failed          double precision,
    xid_codes              integer[]          NOT NULL DEFAULT '{}',
    xid_counts             double precision[] NOT NULL DEFAULT '{}'
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
