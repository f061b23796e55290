-- The fleet registry. Credentials are references (env:PREFIX or file:/path), never secrets.
CREATE TABLE nodes (
    id            text        PRIMARY KEY,
    bmc_url       text        NOT NULL,
    profile       text        NOT NULL,
    supplier      text        NOT NULL DEFAULT '',
    site          text        NOT NULL,
    rack          text        NOT NULL DEFAULT '',
    fabric_domain text        NOT NULL DEFAULT '',
    pool          text        NOT NULL DEFAULT '',
    credentials   text        NOT NULL CHECK (credentials ~ '^(env:|file:/)'),
    imported_at   timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX nodes_site_pool ON nodes (site, pool);
