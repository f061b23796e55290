-- A released wave's release event and its re-drives (test plan A4, "broker amnesia"): a
-- wave.planned the broker acknowledged and then lost never reaches the updater, and the wave
-- would sit until its deadline halted the rollout. The planner publishes the same event again
-- (same event id: consumers that took it drop the copy) when the wave shows no progress.
ALTER TABLE waves
    ADD COLUMN release_event uuid,                     -- the wave.planned event's id
    ADD COLUMN redriven_at   timestamptz,              -- when it was last published again
    ADD COLUMN redrives      integer NOT NULL DEFAULT 0;
-- The re-drive query reads a released wave's newest step at every worker poll: one index probe
-- instead of a pass over the rollout's nodes (9,375 in the largest wave of 12,500).
CREATE INDEX rollout_nodes_wave_step ON rollout_nodes (rollout_id, wave, step_at);
