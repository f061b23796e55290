-- Maintenance windows per pool and per site as the planner announced them
-- (`maintenance.changed`, issue 27, item 4): the updater starts no node's work outside them.
-- A cleared schedule stays as a row with no windows, so an older announcement redelivered
-- after a newer one (set_at) changes nothing.
CREATE TABLE maintenance_windows (
    scope     text        NOT NULL CHECK (scope IN ('pool', 'site')),
    name      text        NOT NULL,
    timezone  text        NOT NULL,
    windows   text[],
    set_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, name)
);
