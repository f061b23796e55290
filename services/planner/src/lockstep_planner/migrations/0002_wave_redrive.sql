-- A released wave's release event and its re-drives (test plan A4, "broker amnesia"): a
-- wave.planned the broker acknowledged and then lost never reaches the updater, and the wave
-- would sit until its deadline halted the rollout. The planner publishes the same event again
-- (same event id: consumers that took it drop the copy) when the wave shows no progress.
ALTER TABLE waves
    ADD COLUMN release_event uuid,                     -- the wave.planned event's id
    ADD COLUMN redriven_at   timestamptz,              -- when it was last published again
    ADD COLUMN redrives      integer NOT NULL DEFAULT 0;
