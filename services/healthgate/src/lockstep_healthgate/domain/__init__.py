"""Pure domain logic of the healthgate service: no broker, database, Redfish or HTTP imports
(enforced by import-linter)."""
