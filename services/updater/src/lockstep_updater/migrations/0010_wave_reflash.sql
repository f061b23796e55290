-- The components whose flip-back after a tripped gate the wave's approved plan lets re-flash the
-- previous attested image, a forced downgrade (`wave.planned` `reflash`, issue 29 item 2). A
-- wave recorded before it says none: its one-way flip-backs fail before any drain, as before.
ALTER TABLE waves ADD COLUMN reflash text[] NOT NULL DEFAULT '{}';
