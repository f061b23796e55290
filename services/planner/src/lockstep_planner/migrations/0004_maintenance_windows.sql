-- Maintenance windows per pool and per site (issue 27, item 4): what an operator declared with
-- `lockstep pool set` (a `maintenance.requested` event), as the planner holds it. One row per
-- pool or site that has windows; none: work may start at any time. Each change is also an
-- audit line under `pool:<name>` / `site:<name>`.
CREATE TABLE maintenance_windows (
    scope     text        NOT NULL CHECK (scope IN ('pool', 'site')),
    name      text        NOT NULL,
    timezone  text        NOT NULL,
    windows   text[]      NOT NULL CHECK (cardinality(windows) > 0),
    set_by    text        NOT NULL,
    set_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, name)
);
