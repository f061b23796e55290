"""In-memory stand-ins for the planner's store and fleet source, for unit tests."""
