-- A digest of each stored report's versions, so a report that repeats them (the steady state of
-- a fleet) is recognised without reading and parsing the stored jsonb. NULL: compare in full.
ALTER TABLE observations ADD COLUMN digest text;
