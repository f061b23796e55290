"""The agent's configuration file (TOML), checked whole before anything starts.

    node = "gpu-0001"                     # this node's id, as enrolled
    site = "site-a"
    nats_url = "tls://nats.example.net:4222"
    nkey_file = "/etc/lockstep-agent/gpu-0001.nk"   # from `lockstep agent enroll`, mode 0600
    ca_file = "/etc/lockstep-agent/ca.pem"          # the CA of the NATS servers' certificates
    # optional:
    namespace = "lockstep"
    data_dir = "/var/lib/lockstep-agent"  # the spool (reports waiting for their ack)
    cadence_s = 10.0
    spool_limit = 8640                    # reports kept during an outage (12 h at 10 s)
    root = "/"                            # the filesystem the probes read
    metrics_port = 9464                   # /metrics, /healthz, /readyz (default: not served)
    metrics_host = "127.0.0.1"
    # optional diagnostics, read from the files a job epilog or a timer writes:
    dcgm_result = "/var/lib/lockstep-agent/dcgm-diag.json"   # `dcgmi diag -r 1 -j` output
    dcgm_level = 1                        # the -r level that file's run used
    nccl_result = "/var/lib/lockstep-agent/all-reduce.log"   # `all_reduce_perf` output
    nccl_expected_gbps = 360.0            # what this node class should reach
    diagnostics_max_age_s = 86400.0       # older results are not reported

Every problem is one line naming the file and the field (``ConfigError``); nothing is started
before the whole file is good. The credential itself is read at connect time
(``lockstep_common.natsconn.read_secret``: refused when group or others may read it).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from lockstep_common import subjects
from lockstep_common.identities import agent_identity
from lockstep_common.natsconn import NatsAccess


class ConfigError(ValueError):
    """A configuration that cannot be used: one line naming what is wrong."""


class AgentConfig(BaseModel):
    """A node agent's settings (see the module docstring for the file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str
    site: str
    nats_url: str = Field(min_length=1)
    nkey_file: Path
    ca_file: Path | None = None
    namespace: str = "lockstep"
    data_dir: Path = Path("/var/lib/lockstep-agent")
    cadence_s: float = Field(default=10.0, gt=0, le=3600)
    spool_limit: int = Field(default=8640, gt=0, le=10_000_000)
    root: Path = Path("/")
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    dcgm_result: Path | None = None
    dcgm_level: int = Field(default=1, ge=1, le=4)
    nccl_result: Path | None = None
    nccl_expected_gbps: float | None = Field(default=None, gt=0)
    diagnostics_max_age_s: float = Field(default=86400.0, gt=0)

    @field_validator("node", "site", "namespace")
    @classmethod
    def _token(cls, value: str, info: ValidationInfo) -> str:
        return subjects.token(value, str(info.field_name))

    @property
    def identity(self) -> str:
        """The NATS identity the agent connects as."""
        return agent_identity(self.node)

    def access(self) -> NatsAccess:
        """How the agent connects: as ``agent-<node>`` with its nkey, over TLS when a CA is
        given (``nats_url`` a comma-separated list)."""
        servers = tuple(u.strip() for u in self.nats_url.split(","))
        return NatsAccess(servers, self.identity, None, self.ca_file, nkey_file=self.nkey_file)


def load(path: Path) -> AgentConfig:
    """The configuration in ``path``.

    Raises:
        ConfigError: unreadable file, not TOML, unknown or missing field, bad value.
    """
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"config {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config {path}: not TOML: {exc}") from None
    try:
        return AgentConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(file)"
        raise ConfigError(f"config {path}: {where}: {first['msg']}") from None
