-- Fabric domains the OCI way (seed 002; issue 10, deliverable 6): per NVLink domain the bundle
-- it runs (current, NULL while unknown or being updated) and the one it is pinned to (target),
-- its lifecycle (AVAILABLE, OCCUPIED while a job runs on any of its nodes, PROVISIONING while a
-- rollout updates it), recycle level, and the rollout carrying the update out. update_state and
-- update_reason are derived by domain/fabric.py and stored so readers need no Python; who and
-- when changed it last are here, every change is also a line in the audit trail
-- (rollout_id 'fabric:<domain>').

CREATE TABLE fabric_domains (
    domain        text        PRIMARY KEY,
    current_hash  text,                               -- stack hash of the bundle it runs
    target_hash   text,                               -- stack hash of the bundle it is pinned to
    lifecycle     text        NOT NULL DEFAULT 'AVAILABLE'
                  CHECK (lifecycle IN ('AVAILABLE', 'OCCUPIED', 'PROVISIONING')),
    recycle_level text        NOT NULL DEFAULT 'FULL_RECYCLE'
                  CHECK (recycle_level IN ('FULL_RECYCLE', 'SKIP_RECYCLE')),
    update_state  text        NOT NULL
                  CHECK (update_state IN ('WILL_UPDATE', 'NO_UPDATE', 'SKIP_RECYCLE_ENABLED')),
    update_reason text        NOT NULL,
    rollout_id    text,                               -- the rollout holding it, if any
    node_ids      text[]      NOT NULL DEFAULT '{}',  -- its nodes, as the inventory reports them
    changed_by    text        NOT NULL,
    changed_at    timestamptz NOT NULL
);
CREATE INDEX fabric_domains_rollout ON fabric_domains (rollout_id) WHERE rollout_id IS NOT NULL;

-- `lockstep fabric pin` writes a 'pin' command (rollout_id 'fabric:<domain>', the bundle's
-- stack hash in `bundle`) that the planner's worker carries out, refusing it while the domain
-- is PROVISIONING: the planner stays the only writer of its state.
ALTER TABLE commands ADD COLUMN bundle text NOT NULL DEFAULT '';
ALTER TABLE commands DROP CONSTRAINT commands_action_check;
ALTER TABLE commands ADD CONSTRAINT commands_action_check
    CHECK (action IN ('approve', 'pause', 'resume', 'abort', 'pin'));
