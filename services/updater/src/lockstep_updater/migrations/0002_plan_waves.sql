-- The approved wave of every node of a plan: a released wave may only name the nodes the
-- approved plan put in that wave (reliability.md F3: a corrupted plan listing more nodes than
-- the approved wave is refused at action time, not trusted). Older plans keep '{}': membership
-- of the plan is then all that is checked, as before.
ALTER TABLE plans ADD COLUMN node_waves jsonb NOT NULL DEFAULT '{}';
