-- A BMC reached over plain http:// gets its credentials only when its registry entry says so
-- (issue 15): a lab or simulated BMC. Nodes registered before stay refused until re-imported
-- with ``allow_plain_http: true`` or an https:// URL.
ALTER TABLE nodes ADD COLUMN allow_plain_http boolean NOT NULL DEFAULT false;
