-- A registry entry's version (issue 28 item 3): the updater serves its steps from a snapshot of
-- a wave's nodes and re-reads a node whose entry is newer than its copy. Drawn from one sequence
-- (never a per-row counter), so that it only grows for a node id even across a removal and a
-- re-import: a copy from before the removal is always older.
CREATE SEQUENCE nodes_version;
ALTER TABLE nodes ADD COLUMN version bigint NOT NULL DEFAULT nextval('nodes_version');
