"""Pure domain logic of the planner service: no broker, database, Redfish or HTTP imports
(enforced by import-linter)."""
