-- The stragglers last reported per hardware profile (drift.stragglers), so the next evaluation
-- announces only a change and `lockstep fleet stragglers` shows the current ones. finding is the
-- event's data (stragglers worst first, shared versions); one row per profile, replaced.
CREATE TABLE stragglers (
    profile      text        PRIMARY KEY,
    node_ids     text[]      NOT NULL,
    finding      jsonb       NOT NULL,
    evaluated_at timestamptz NOT NULL
);
