-- "Newest wins" follows the broker, not the sender (issue 15): each row keeps the JetStream
-- stream sequence of the event that wrote it, and only an event later in the same stream
-- replaces it. Senders' times decided before, and a pin dated 2999 outranked every later pin.
-- Rows written before this migration get 0: whatever arrives next replaces them.
ALTER TABLE pins ADD COLUMN stream_seq bigint NOT NULL DEFAULT 0 CHECK (stream_seq >= 0);
ALTER TABLE pins ALTER COLUMN stream_seq DROP DEFAULT;

ALTER TABLE wave_nodes ADD COLUMN stream_seq bigint NOT NULL DEFAULT 0 CHECK (stream_seq >= 0);
ALTER TABLE wave_nodes ALTER COLUMN stream_seq DROP DEFAULT;
-- ``since`` and ``at`` now record when the row was written here (never compared).
ALTER TABLE wave_nodes ALTER COLUMN since SET DEFAULT now();

ALTER TABLE recorded_changes
    ADD COLUMN stream_seq bigint NOT NULL DEFAULT 0 CHECK (stream_seq >= 0);
ALTER TABLE recorded_changes ALTER COLUMN stream_seq DROP DEFAULT;
ALTER TABLE recorded_changes ALTER COLUMN at SET DEFAULT now();
