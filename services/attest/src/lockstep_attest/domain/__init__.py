"""Pure domain logic of the attest service: no broker, database, Redfish or HTTP imports
(enforced by import-linter)."""
