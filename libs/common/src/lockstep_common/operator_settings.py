"""What the operator CLI reads from ``LOCKSTEP_*`` to ask the services over the bus: where NATS
is, as whom, the namespace (the shared settings of ``ServiceSettings``), and nothing of any
service's own: the CLI imports no service (issue 26, item 3), and a service's
``LOCKSTEP_<SERVICE>_*`` variables are that service's business, ignored here rather than
refused.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import ServiceSettings


class OperatorSettings(ServiceSettings):
    """The shared ``LOCKSTEP_*`` settings, as an operator command uses them."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_CLI_",  # reads none of its own: no service's prefix either
        extra="ignore",
        populate_by_name=True,
        validate_default=True,
    )

    inventory_rules_file: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("LOCKSTEP_INVENTORY_RULES_FILE", "inventory_rules_file"),
        description="The inventory's compatibility rules file, where the CLI runs beside it: "
        "`fleet pin` checks a stack's profiles against them (unset: the packaged table).",
    )
