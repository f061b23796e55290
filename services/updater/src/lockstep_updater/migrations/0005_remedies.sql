-- The GSP / driver runbook (seed 004; docs/updater.md "The GSP runbook"): a third kind of work
-- item, 'remedy', started by drift.detected and belonging to no rollout (rollout_id is the
-- remedy's own id, wave 0), and the in-band step (driver, CUDA, NCCL, fabric manager through
-- the node agent) that it and a rollout's in-band components run. A held remedy waits for
-- approval with lease_until = 'infinity' (never claimable until released).
ALTER TABLE node_work DROP CONSTRAINT node_work_state_check;
ALTER TABLE node_work ADD CONSTRAINT node_work_state_check CHECK (state IN ('pending', 'preflight', 'staging', 'cordoning', 'draining', 'activating', 'awaiting_bmc', 'verifying', 'in_band', 'uncordoning', 'done', 'cancelled', 'failed', 'quarantined'));
ALTER TABLE node_work DROP CONSTRAINT node_work_kind_check;
ALTER TABLE node_work ADD CONSTRAINT node_work_kind_check
    CHECK (kind IN ('update', 'rollback', 'remedy'));
CREATE INDEX node_work_node_kind ON node_work (node_id, kind);
