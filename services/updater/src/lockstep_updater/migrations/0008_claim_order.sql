-- A claim takes the longest-ready open item first (adapters/repository.py, _CLAIMABLE): with an
-- index in that order it reads the first free row instead of sorting every open item (a
-- whole-fleet wave has thousands) at every claim. The failures of a wave are counted before
-- every action (the guard's failure budget): only failed and quarantined rows are indexed.
CREATE INDEX node_work_ready ON node_work ((COALESCE(lease_until, updated_at)), id)
    WHERE state NOT IN ('cancelled', 'done', 'failed', 'quarantined');
CREATE INDEX node_work_failed ON node_work (rollout_id, wave)
    WHERE state IN ('failed', 'quarantined');
