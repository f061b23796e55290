-- A/B flip-back after a tripped gate (docs/updater.md "Flip-back"): a node whose canary update
-- activated an image gets a second work item, kind 'rollback', run by the same step machine
-- under the same leases, fencing tokens and step history, from its drain to the previous bank.
ALTER TABLE node_work ADD COLUMN kind text NOT NULL DEFAULT 'update'
    CHECK (kind IN ('update', 'rollback'));
ALTER TABLE node_work DROP CONSTRAINT node_work_rollout_id_node_id_key;
ALTER TABLE node_work ADD CONSTRAINT node_work_rollout_node_kind UNIQUE (rollout_id, node_id, kind);
