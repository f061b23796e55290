"""Pure domain logic of the updater service: no broker, database, Redfish or HTTP imports
(enforced by import-linter)."""
