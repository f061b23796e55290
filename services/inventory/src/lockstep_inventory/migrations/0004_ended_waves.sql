-- Waves and rollouts that have ended. Consumers retry out of order, so a wave.planned can
-- arrive after its wave.completed (or the rollout's end); it must not make nodes "in a wave"
-- again for good. wave = -1 marks the whole rollout ended.
CREATE TABLE ended_waves (
    rollout_id text        NOT NULL,
    wave       integer     NOT NULL,
    ended_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rollout_id, wave)
);
