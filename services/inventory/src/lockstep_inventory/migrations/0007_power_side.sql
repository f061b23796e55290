-- Which redundant power feed a node hangs on (A, B, ...): PSU/BBU firmware moves one side at a
-- time (seed 000), so the planner must know it. Empty: not known.
ALTER TABLE nodes ADD COLUMN power_side text NOT NULL DEFAULT '';
