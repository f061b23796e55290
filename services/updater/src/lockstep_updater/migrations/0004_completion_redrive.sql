-- A completed wave's wave.completed and its re-drives (test plan A4, "broker amnesia"): an
-- event the broker acknowledged and then lost never reaches the planner or the healthgate, and
-- the wave would wait for its deadline. Until the planner releases a later wave of the rollout
-- (or the rollout halts), the updater publishes the same event again (same id: a consumer that
-- took it drops the copy), at growing intervals and a bounded number of times.
ALTER TABLE waves
    ADD COLUMN completed_event uuid,                   -- the wave.completed event's id
    ADD COLUMN redriven_at     timestamptz,            -- when it was last published again
    ADD COLUMN redrives        integer NOT NULL DEFAULT 0;
