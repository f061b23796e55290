"""Settings: one validated object per service, built in ``create_app`` and never at import.

Connection settings are shared by every service of a deployment and read from ``LOCKSTEP_*``
(``LOCKSTEP_NATS_URL``, ``LOCKSTEP_DATABASE_URL``, ``LOCKSTEP_NAMESPACE``); everything else a
service reads from its own prefix (``LOCKSTEP_INVENTORY_*``, ...). Durations are in seconds.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lockstep_common import topology
from lockstep_common.identities import SERVICE_NAMES
from lockstep_common.natsconn import NatsAccess, read_secret
from lockstep_common.subjects import token

Seconds = Annotated[float, Field(gt=0)]


def _shared(name: str, **kwargs: object) -> object:
    """A field read from the shared ``LOCKSTEP_<NAME>`` variable (or set by keyword).

    The keyword (``nats_url=...``) works through ``populate_by_name``; the bare name is not an
    alias, or the environment's ``NATS_URL``, ``DATABASE_URL`` or ``NAMESPACE`` (which
    Kubernetes and PaaS platforms set) would be read, ahead of ``LOCKSTEP_<NAME>``.
    """
    return Field(validation_alias=AliasChoices(f"LOCKSTEP_{name}"), **kwargs)  # type: ignore[call-overload]


class ServiceSettings(BaseSettings):
    """What every Lockstep service needs. Subclasses set ``env_prefix``."""

    model_config = SettingsConfigDict(extra="forbid", validate_default=True, populate_by_name=True)

    nats_url: str = _shared(  # type: ignore[assignment]
        "NATS_URL",
        default="nats://127.0.0.1:4222",
        description="NATS server URL(s), comma-separated.",
    )
    nats_user: str | None = _shared(  # type: ignore[assignment]
        "NATS_USER", default=None, description="The NATS identity this process connects as."
    )
    nats_password_file: Path | None = _shared(  # type: ignore[assignment]
        "NATS_PASSWORD_FILE",
        default=None,
        description="File holding that identity's password (mode 0600; never on a command line).",
    )
    nats_ca_file: Path | None = _shared(  # type: ignore[assignment]
        "NATS_CA_FILE",
        default=None,
        description="CA certificate(s) to verify the NATS server with; set, TLS is used.",
    )
    database_url: str = _shared(  # type: ignore[assignment]
        "DATABASE_URL",
        default="postgresql://postgres@127.0.0.1:5432/lockstep",
        description="PostgreSQL DSN; each service uses its own schema in it. A password belongs "
        "in a libpq password file the DSN names (?passfile=/path, mode 0600), not in the DSN.",
    )
    namespace: str = _shared(  # type: ignore[assignment]
        "NAMESPACE", default="lockstep", description="Subject prefix and stream-name prefix."
    )
    db_schema: str = Field(default="", description="Postgres schema; defaults to the service name.")
    db_pool_min: int = Field(default=1, ge=1, description="Minimum pooled connections.")
    db_pool_max: int = Field(default=8, ge=1, description="Maximum pooled connections.")
    http_host: str = Field(default="127.0.0.1", description="Bind address of /metrics and health.")
    http_port: int = Field(default=0, ge=0, le=65535, description="Port of /metrics (0: any free).")
    log_level: str = Field(default="INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$")
    log_json: bool = Field(default=True, description="One JSON object per log line.")

    # Shared (LOCKSTEP_STREAM_REPLICAS): every service checks the live streams against it at
    # start, so one service with another count would refuse to run.
    stream_replicas: int = _shared(  # type: ignore[assignment]
        "STREAM_REPLICAS",
        default=1,
        ge=1,
        le=5,
        description="Replicas per stream and consumer: 1 on a single server, 3 on a cluster "
        "(R3 survives the loss of one server; `lockstep up --nats-cluster 3` sets it).",
    )
    duplicate_window_s: Seconds = Field(
        default=600.0, description="JetStream duplicate window; must exceed relay_retry_horizon_s."
    )
    max_message_bytes: int = Field(
        default=1 << 20, ge=1024, description="Largest message a consumer accepts; larger: DLQ."
    )
    stream_max_message_bytes: int = Field(
        default=1 << 20, ge=1024, description="Largest message a stream stores (max_msg_size)."
    )
    # Shared (LOCKSTEP_STREAM_*): every service of a deployment applies them to the same
    # streams, so they must not differ from one service to the next.
    stream_max_age_s: dict[str, float] = _shared(  # type: ignore[assignment]
        "STREAM_MAX_AGE_S",
        default_factory=dict,
        description="How long streams keep messages, per stream, as JSON overriding the "
        'defaults: {"TELEMETRY": 43200} (defaults: 30 days; TELEMETRY 1 day, ADVISORIES 7 '
        "days). At least an hour and the duplicate window, at most a year, and less than "
        "inbox_retention_s. Applied to live streams as services start.",
    )
    stream_max_bytes: dict[str, int] = _shared(  # type: ignore[assignment]
        "STREAM_MAX_BYTES",
        default_factory=dict,
        description="How many bytes streams keep, per stream, as JSON overriding the defaults: "
        '{"TELEMETRY": 4294967296} (defaults: 256 MiB; TELEMETRY 1 GiB, ADVISORIES 64 MiB). '
        "The oldest messages go first. At least 16 times stream_max_message_bytes, at most "
        "1 TiB; nats-server reserves each stream's limit. Applied to live streams as "
        "services start.",
    )

    consumer_batch: int = Field(default=256, ge=1, le=4096, description="Messages per pull.")
    consumer_fetch_timeout_s: Seconds = Field(default=1.0, description="Longest wait per pull.")
    consumer_ack_wait_s: Seconds = Field(
        default=30.0,
        description="Redelivery delay of an unacknowledged message (first delivery); equal to "
        "consumer_redelivery_backoff_s[0] when that is set.",
    )
    consumer_max_deliver: int = Field(default=5, ge=2, le=100, description="Deliveries before DLQ.")
    consumer_retry_backoff_s: tuple[float, ...] = Field(
        default=(1.0, 5.0, 15.0, 60.0),
        description="Wait after a transient error on delivery n before delivery n+1: entry n "
        "(the last repeats). Observed as given whatever the redelivery BackOff: the runtime "
        "offsets the -NAK delay it sends by the BackOff (topology.ConsumerSpec.nak_delay).",
    )
    consumer_redelivery_backoff_s: tuple[float, ...] = Field(
        default=(30.0, 60.0, 120.0, 300.0),
        description="JetStream BackOff: entry n is how long after delivery n a message never "
        "acknowledged (a crashed or hung consumer) is redelivered (the last repeats); fewer "
        "entries than consumer_max_deliver, the first equal to consumer_ack_wait_s. Empty: "
        "every redelivery after consumer_ack_wait_s. Transient-error retries do not follow "
        "it (consumer_retry_backoff_s).",
    )

    consumer_max_ack_pending: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="JetStream MaxAckPending: deliveries a consumer may hold unacknowledged; at "
        "the limit the server stops delivering without an error (lockstep_consumer_stalled).",
    )
    consumer_watch_s: Seconds = Field(
        default=15.0,
        description="How often each consumer's ack-pending count is read from JetStream "
        "(lockstep_consumer_ack_pending; a stall shows within two of these).",
    )

    relay_batch: int = Field(
        default=512, ge=1, le=10_000, description="Outbox rows per relay pass."
    )
    relay_poll_s: Seconds = Field(default=1.0, description="Relay poll when no notification came.")
    relay_retry_horizon_s: Seconds = Field(
        default=300.0, description="Longest backoff between relay attempts on one row."
    )
    shutdown_grace_s: Seconds = Field(default=20.0, description="Time to finish in-flight work.")

    max_clock_skew_s: Seconds = Field(
        default=300.0,
        description="How far into the future an event's time may lie; later ones are refused "
        "(a forged far-future time would otherwise win every newest-wins decision).",
    )
    maintenance_interval_s: Seconds = Field(
        default=3600.0,
        description="How often retention purges run; the first runs as the service starts.",
    )
    outbox_retention_s: Seconds = Field(
        default=86_400.0, description="How long published outbox rows are kept."
    )
    inbox_retention_s: Seconds = Field(
        default=31 * 86_400.0,
        description="How long applied event ids are remembered; must outlast every stream's "
        "max age, or a replay of an event still stored could be applied twice.",
    )
    dead_letter_retention_s: Seconds = Field(
        default=90 * 86_400.0, description="How long dead-letter rows are kept for operators."
    )
    operator_request_retention_s: Seconds = Field(
        default=90 * 86_400.0,
        description="How long the audit of operator commands (``operator_requests``: who asked "
        "what, the outcome, the stored reply a retried request gets again) is kept.",
    )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        _check_url(value, {"postgresql", "postgres"})
        return value

    @field_validator("nats_url")
    @classmethod
    def _nats_url(cls, value: str) -> str:
        return check_nats_url(value)

    def nats_access(self) -> NatsAccess:
        """Where and as whom this process connects to NATS."""
        return NatsAccess.from_url(
            self.nats_url, self.nats_user, self.nats_password_file, self.nats_ca_file
        )

    def stream_limits(self) -> dict[str, topology.StreamLimits]:
        """Every stream's limits: the defaults with ``stream_max_age_s`` and
        ``stream_max_bytes`` applied (validated when the settings were built)."""
        return topology.stream_limits(
            self.stream_max_age_s,
            self.stream_max_bytes,
            duplicate_window_s=self.duplicate_window_s,
            max_msg_bytes=self.stream_max_message_bytes,
        )

    def stream_policy(self) -> topology.StreamPolicy:
        """What this deployment's streams are created and kept with."""
        return topology.StreamPolicy(
            self.stream_replicas,
            self.duplicate_window_s,
            self.stream_max_message_bytes,
            self.stream_limits(),
        )

    @model_validator(mode="after")
    def _check(self) -> ServiceSettings:
        token(self.namespace, "namespace")
        self.nats_access()  # a user without a password file, or the reverse
        if self.nats_password_file is not None:
            read_secret(self.nats_password_file, "NATS password file")
        if self.db_schema and not self.db_schema.replace("_", "").isalnum():
            raise ValueError(f"db_schema {self.db_schema!r} must be letters, digits and '_'")
        if self.duplicate_window_s <= self.relay_retry_horizon_s:
            raise ValueError(
                f"duplicate_window_s ({self.duplicate_window_s}) must exceed relay_retry_horizon_s "
                f"({self.relay_retry_horizon_s}), or a retried publish could be stored twice"
            )
        backoff = self.consumer_redelivery_backoff_s
        if backoff and len(backoff) >= self.consumer_max_deliver:
            raise ValueError(
                f"consumer_redelivery_backoff_s has {len(backoff)} entries; JetStream needs fewer "
                f"than consumer_max_deliver ({self.consumer_max_deliver})"
            )
        if backoff and backoff[0] != self.consumer_ack_wait_s:
            # nats-server replaces AckWait with BackOff[0] (setConsumerConfigDefaults in
            # server/consumer.go): a shorter one would redeliver batches still being applied,
            # a longer one would make the live ack_wait differ from the declared one, and the
            # start-up self-check refuse every restart.
            raise ValueError(
                f"consumer_redelivery_backoff_s[0] ({backoff[0]}) differs from "
                f"consumer_ack_wait_s ({self.consumer_ack_wait_s}); JetStream uses BackOff[0] "
                "as AckWait"
            )
        if self.db_pool_max < self.db_pool_min:
            raise ValueError("db_pool_max must be >= db_pool_min")
        limits = self.stream_limits()
        longest = max(limits[spec.base].max_age_s for spec in topology.EVENT_STREAMS)
        if self.inbox_retention_s <= longest:
            raise ValueError(
                f"inbox_retention_s ({self.inbox_retention_s:.0f}) must exceed the longest "
                f"stream max age ({longest:.0f} s): a replay of an event still stored would "
                "otherwise be applied twice"
            )
        return self


def check_nats_url(value: str) -> str:
    """``value`` if every comma-separated URL in it names a NATS server, else ValueError."""
    for url in value.split(","):
        _check_url(url.strip(), {"nats", "tls", "ws", "wss"})
    return value


def _check_url(url: str, schemes: set[str]) -> None:
    """Refuse a URL that names no usable server, before anything tries to connect to it: a
    malformed DSN otherwise surfaces as a driver traceback deep inside the first connect. The
    messages never repeat the URL, which may carry a password."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a non-numeric or out-of-range port
    except ValueError:
        # urlsplit's own message can quote part of the password (a "/" in it ends the host
        # part early), so it is not repeated.
        raise ValueError(
            "not a URL (a port that is not a number, or an unencoded '/', '?' or '#' in the "
            "password?)"
        ) from None
    if parts.scheme not in schemes:
        expected = " or ".join(sorted(s + "://" for s in schemes))
        got = f"{parts.scheme}://" if parts.scheme else "no scheme"
        raise ValueError(f"must start with {expected}, not {got}")
    if not parts.hostname and port is None and "host=" not in parts.query:
        raise ValueError("names no host")


def explain(settings_class: type[ServiceSettings], exc: ValidationError) -> str:
    """One line naming each offending variable, for a user who mistyped one: ``LOCKSTEP_X:
    what is wrong``. Shared fields are reported under their ``LOCKSTEP_<NAME>`` alias."""
    prefix = str(settings_class.model_config.get("env_prefix", "")).upper()
    parts = []
    for err in exc.errors():
        message = str(err["msg"]).removeprefix("Value error, ")
        field = ".".join(str(p) for p in err["loc"])
        if not field:
            parts.append(message)
        elif field.upper().startswith("LOCKSTEP_"):
            parts.append(f"{field.upper()}: {message}")
        else:
            parts.append(f"{prefix}{field.upper()}: {message}")
    return "; ".join(parts)


# LOCKSTEP_* variables read by the command-line program rather than by a settings class.
OTHER_VARIABLES = frozenset({"LOCKSTEP_DATA_DIR"})


def variable_names(settings_class: type[ServiceSettings]) -> frozenset[str]:
    """Every ``LOCKSTEP_*`` variable ``settings_class`` reads (upper case)."""
    prefix = str(settings_class.model_config.get("env_prefix", "")).upper()
    names = set(OTHER_VARIABLES)
    for name, field in settings_class.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(c.upper() for c in alias.choices if isinstance(c, str))
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(prefix + name.upper())
    return frozenset(names)


def unknown_variables(
    environ: Mapping[str, str], settings_class: type[ServiceSettings]
) -> list[str]:
    """A line per ``LOCKSTEP_*`` variable that looks meant for ``settings_class`` but is none
    of its settings, with the closest name: pydantic-settings ignores such a variable, so a
    typo (``LOCKSTEP_NATS_ULR``) would silently leave the default in force.

    Reported: a variable under the class's own prefix, and any other ``LOCKSTEP_*`` variable
    close to a known name. Left alone: other services' variables and names close to none
    (``env:PREFIX`` credential references may use any ``LOCKSTEP_*`` prefix).
    """
    known = variable_names(settings_class)
    own = str(settings_class.model_config.get("env_prefix", "")).upper()
    # Another service's variable is that service's business, not a typo, in a process that
    # reads the whole environment.
    others = tuple(
        f"LOCKSTEP_{s.upper()}_" for s in SERVICE_NAMES if own != f"LOCKSTEP_{s.upper()}_"
    )
    lines = []
    for raw in sorted(environ):
        name = raw.upper()
        if not name.startswith("LOCKSTEP_") or name in known or name.startswith(others):
            continue
        mine = bool(own) and name.startswith(own)
        # Outside the class's own prefix only a typo counts: a name as long as a known one
        # give or take two characters (LOCKSTEP_TEST_NATS_URL, a test harness's, is no typo
        # of LOCKSTEP_NATS_URL).
        candidates = sorted(k for k in known if mine or abs(len(k) - len(name)) <= 2)
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6 if mine else 0.85)
        if close:
            lines.append(f"{raw} is not a Lockstep setting; did you mean {close[0]}?")
        elif mine:
            lines.append(f"{raw} is not a setting of {own.lower().removesuffix('_')[9:]}")
    return lines
