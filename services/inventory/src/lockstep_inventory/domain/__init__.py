"""Pure domain logic of the inventory service: no broker, database, Redfish or HTTP imports
(enforced by import-linter)."""
