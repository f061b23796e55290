-- What each node runs (latest report per source), every change, its drift set, and the facts
-- drift is judged against (pins, waves, recorded rollout steps). design.md "inventory".

-- The latest applied report per node and source. ``sequence`` orders reports of one source
-- (the sweep id for redfish, the agent's counter for agent) so replays change nothing.
CREATE TABLE observations (
    node_id       text        NOT NULL,
    source        text        NOT NULL CHECK (source IN ('redfish', 'agent')),
    sequence      bigint      NOT NULL CHECK (sequence >= 0),
    observed_at   timestamptz NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now(),
    readable      boolean     NOT NULL,
    error         text,
    unreadable_since timestamptz,
    components    jsonb       NOT NULL DEFAULT '{}',  -- component -> version its members agree on
    conflicts     jsonb       NOT NULL DEFAULT '{}',  -- component -> {member id: version}
    members       jsonb       NOT NULL DEFAULT '{}',  -- member id -> version, unknown ones too
    firmware_dirs text[],                             -- NULL: not reported
    loaded_module text,
    PRIMARY KEY (node_id, source)
);

-- Every version change, append-only, written with COPY. ``item`` is a member id (Redfish), a
-- component or in-band fact (agent), or ``readable``; NULL versions mean absent/unreadable.
CREATE TABLE history (
    node_id     text        NOT NULL,
    source      text        NOT NULL,
    item        text        NOT NULL,
    old_version text,
    new_version text,
    observed_at timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX history_node_time ON history (node_id, observed_at DESC);

-- The current drift set of every evaluated node (empty items: conforms).
CREATE TABLE drift (
    node_id      text        PRIMARY KEY,
    stack_hash   text,
    items        jsonb       NOT NULL,
    kinds        text[]      NOT NULL,
    since        timestamptz NOT NULL,
    evaluated_at timestamptz NOT NULL
);
CREATE INDEX drift_drifted ON drift (node_id) WHERE cardinality(kinds) > 0;

-- The newest pin per (site, scope): pin.changed events, stale ones ignored.
CREATE TABLE pins (
    site        text        NOT NULL,
    scope_key   text        NOT NULL,  -- canonical JSON of the ScopeSelector
    scope       jsonb       NOT NULL,
    stack_hash  text        NOT NULL,
    stack       jsonb       NOT NULL,
    rollout_id  text,
    event_id    uuid        NOT NULL,
    occurred_at timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (site, scope_key)
);

-- Every stack ever pinned, by hash: what an admission check compares a node with.
CREATE TABLE stacks (
    stack_hash text        PRIMARY KEY,
    stack      jsonb       NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now()
);

-- Nodes in an active wave (wave.planned until wave.completed or the rollout ends).
CREATE TABLE wave_nodes (
    rollout_id text        NOT NULL,
    wave       integer     NOT NULL,
    node_id    text        NOT NULL,
    since      timestamptz NOT NULL,
    PRIMARY KEY (rollout_id, node_id)
);
CREATE INDEX wave_nodes_node ON wave_nodes (node_id);

-- The last version a rollout step recorded per node and component (device.activated/verified):
-- a difference it explains is not "unexpected".
CREATE TABLE recorded_changes (
    node_id    text        NOT NULL,
    component  text        NOT NULL,
    to_version text        NOT NULL,
    rollout_id text        NOT NULL,
    at         timestamptz NOT NULL,
    PRIMARY KEY (node_id, component)
);

-- One row per Redfish sweep; its id is the sequence of the redfish reports it produced.
CREATE TABLE sweeps (
    id          bigserial   PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    total       integer     NOT NULL,
    done        integer     NOT NULL DEFAULT 0,
    unreadable  integer     NOT NULL DEFAULT 0,
    expanded    integer     NOT NULL DEFAULT 0,
    error       text,
    by          text        NOT NULL
);
