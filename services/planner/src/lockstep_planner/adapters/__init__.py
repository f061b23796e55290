"""The planner's adapters: what reads files (and later the database and the broker)."""
