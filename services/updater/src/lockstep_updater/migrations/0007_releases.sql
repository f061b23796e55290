-- An operator's release of a quarantined node (`lockstep node release NODE --reason ...`): a
-- fourth kind of work item, 'release', recorded in the uncordoning step; the updater gives
-- back Lockstep's drain (only Lockstep's) and ends it done, with who released it and why in
-- the node's history (docs/updater.md "Quarantined nodes").
ALTER TABLE node_work DROP CONSTRAINT node_work_kind_check;
ALTER TABLE node_work ADD CONSTRAINT node_work_kind_check
    CHECK (kind IN ('update', 'rollback', 'remedy', 'release'));
