"""JetStream topology as code, and the start-up self-check.

Streams are declared here once; consumers are declared by the services that own them. At start
every service calls ``ensure_topology``: what is missing is created, what exists must match the
declaration field by field, and anything configured differently stops the service with a list of
the differences (``TopologyMismatch``) rather than running on a stream that, say, keeps no
duplicate window or redelivers forever. Changing a live stream is an operator's decision.

Each stream's limits, how long (``max_age``) and how many bytes (``max_bytes``) it keeps, are
settings rather than code (``LOCKSTEP_STREAM_MAX_AGE_S``, ``LOCKSTEP_STREAM_MAX_BYTES``): the
declared values below are defaults, and a service applies the configured ones to live streams,
so the operator's decision is the setting. Like ``max_age``, a byte limit drops the oldest
messages first (discard old): it bounds the disk a stream can take (a publisher flooding one
stream fills that stream, not the server's store), and must be sized above what consumers could
fall behind by. nats-server reserves every stream's ``max_bytes`` (times its replicas) against
its JetStream storage when the stream is created.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, NotFoundError

from lockstep_common.errors import ConfigurationError, TopologyMismatch
from lockstep_common.subjects import Namespace

log = logging.getLogger(__name__)

ADVISORY_MAX_DELIVERIES = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
ADVISORY_TERMINATED = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED"
DAY = 86_400.0
MIB = 1 << 20
# Bounds of the configurable limits. An hour is the least a stream may keep messages: consumers
# down for a restart or a deploy must find them. A year is the most: the inbox, which must
# remember event ids longer than any stream keeps them, would grow without end. 16 of the
# largest messages is the least a stream may hold; 1 TiB the most anyone would mean.
MIN_MAX_AGE_S = 3600.0
MAX_MAX_AGE_S = 366 * DAY
MIN_MESSAGES_PER_STREAM = 16
MAX_MAX_BYTES = 1 << 40
JS_INSUFFICIENT_RESOURCES = 10047  # nats-server JSInsufficientResourcesErr


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One stream: a base name (namespaced at apply time), its logical subject patterns, and
    its default limits (``max_age_s``, ``max_bytes``; settings may override them)."""

    base: str
    subjects: tuple[str, ...]
    max_age_s: float
    description: str
    namespaced_subjects: bool = True
    max_bytes: int = 256 * MIB


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """How long and how many bytes one stream keeps."""

    max_age_s: float
    max_bytes: int


@dataclass(frozen=True, slots=True)
class StreamPolicy:
    """Deployment-wide stream settings (from ``ServiceSettings.stream_policy``).

    ``limits`` maps stream base names to their configured limits. A service passes them all
    (its settings); streams are then created with them and live streams updated to them. None
    (a simulator or a test that only needs the streams to exist): streams are created with
    the declared defaults and live limits are left as the deployment set them.
    """

    replicas: int = 1
    duplicate_window_s: float = 600.0
    max_msg_bytes: int = 1 << 20
    limits: Mapping[str, StreamLimits] | None = None

    def limits_of(self, spec: StreamSpec) -> StreamLimits:
        """The limits ``spec``'s stream is created with."""
        if self.limits is not None and spec.base in self.limits:
            return self.limits[spec.base]
        return StreamLimits(spec.max_age_s, spec.max_bytes)


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable pull consumer with explicit acks and a finite delivery limit."""

    durable: str
    stream: str
    filter_subjects: tuple[str, ...]
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    redelivery_backoff_s: tuple[float, ...] = ()
    max_ack_pending: int = 1000
    description: str = ""
    namespaced_filters: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def nak_delay(self, delivery: int, wait_s: float) -> float:
        """The delay to send with ``-NAK`` after delivery number ``delivery`` (1-based, as in
        the message's ``num_delivered``) so that nats-server redelivers ``wait_s`` from now.

        The server does not simply wait a nak's delay. ``processNak`` (server/consumer.go) sets
        the message's pending timestamp to ``now - AckWait + delay``, and ``checkPending``
        redelivers once ``now - timestamp`` reaches the message's deadline: ``AckWait``
        without a BackOff, else ``BackOff[min(delivery - 1, len - 1)]`` (its ``o.rdc[seq]``
        counts redeliveries), and ``setConsumerConfigDefaults`` makes ``AckWait`` equal to
        ``BackOff[0]``. So a nak waits ``delay`` plus that deadline minus ``BackOff[0]``: on the
        pinned nats-server 2.15.1, nak delays of 1, 5, 15, 60 s with BackOff 30, 60, 120, 300 s
        were observed as 1, 35, 105, 330 s (the code is the same from v2.10.0 to 2.15.0-dev).
        We subtract that offset. The result may be zero or negative; the server takes either
        (a Go ``time.Duration``) as "the deadline is nearer than AckWait", and without a
        BackOff the delay is exact.
        """
        backoff = self.redelivery_backoff_s
        if not backoff:
            return wait_s
        deadline = backoff[min(max(delivery, 1), len(backoff)) - 1]
        return wait_s - (deadline - backoff[0])


# Default byte limits: 256 MiB holds some 250,000 events of a kilobyte, months of a large
# fleet's rollouts; telemetry, a report per node every few minutes, gets 1 GiB (hours of a
# 4,000-node fleet; older reports are superseded anyway). All of one namespace's streams reserve
# about 3 GiB of the server's JetStream storage.
EVENT_STREAMS: tuple[StreamSpec, ...] = (
    StreamSpec("BUNDLES", ("bundle.>",), 30 * DAY, "Bundle submissions and attestation verdicts"),
    StreamSpec("INTENTS", ("intent.>",), 30 * DAY, "Planners' rollout intents"),
    StreamSpec("ROLLOUTS", ("rollout.>", "wave.>"), 30 * DAY, "Rollout plans, waves, outcomes"),
    StreamSpec("PINS", ("pin.>",), 30 * DAY, "Which golden stack each scope is pinned to"),
    StreamSpec(
        "MAINTENANCE",
        ("maintenance.>",),
        30 * DAY,
        "Maintenance windows operators set per pool and site",
    ),
    StreamSpec("DEVICES", ("device.>",), 30 * DAY, "Per-device stage/activate/verify outcomes"),
    StreamSpec("GATES", ("gate.>",), 30 * DAY, "Health-gate verdicts"),
    StreamSpec(
        "TELEMETRY",
        ("telemetry.>",),
        1 * DAY,
        "Observed inventory and health reports",
        max_bytes=1024 * MIB,
    ),
    StreamSpec("DRIFT", ("drift.>",), 30 * DAY, "Drift detected and resolved"),
    StreamSpec("DLQ", ("dlq.>",), 30 * DAY, "Dead letters: messages no consumer could process"),
)
ADVISORIES = "ADVISORIES"
STREAM_BASES: tuple[str, ...] = (*(s.base for s in EVENT_STREAMS), ADVISORIES)


def advisory_stream(namespace: Namespace) -> StreamSpec:
    """A stream that keeps the DLQ advisories of this namespace's streams.

    JetStream has no dead-letter queue: when a message is terminated or runs out of deliveries
    the server only emits a core-NATS advisory (nats.docs, reference/jetstream/advisory), which
    is lost if nobody listens at that instant. Capturing them in a stream makes them durable.
    """
    subjects = tuple(
        f"{kind}.{namespace.stream(spec.base)}.*"
        for spec in EVENT_STREAMS
        for kind in (ADVISORY_MAX_DELIVERIES, ADVISORY_TERMINATED)
    )
    return StreamSpec(
        ADVISORIES,
        subjects,
        7 * DAY,
        "DLQ advisories",
        namespaced_subjects=False,
        max_bytes=64 * MIB,
    )


def stream_limits(
    max_age_s: Mapping[str, float],
    max_bytes: Mapping[str, int],
    *,
    duplicate_window_s: float,
    max_msg_bytes: int,
) -> dict[str, StreamLimits]:
    """Every stream's limits: the declared defaults with the configured overrides applied.

    Raises:
        ValueError: naming the stream and the bound for an override of a stream that does not
            exist or outside its bounds (a max age of at least an hour, at most a year and
            longer than the duplicate window, which nats-server requires; a byte limit of at
            least 16 of the largest messages and at most 1 TiB).
    """
    for name, overrides in (("stream_max_age_s", max_age_s), ("stream_max_bytes", max_bytes)):
        unknown = sorted(set(overrides) - set(STREAM_BASES))
        if unknown:
            raise ValueError(
                f"{name} names no such stream: {', '.join(unknown)} "
                f"(streams: {', '.join(STREAM_BASES)})"
            )
    least_bytes = MIN_MESSAGES_PER_STREAM * max_msg_bytes
    least_age = max(MIN_MAX_AGE_S, duplicate_window_s)
    out: dict[str, StreamLimits] = {}
    for spec in (*EVENT_STREAMS, advisory_stream(Namespace("lockstep"))):
        age = float(max_age_s.get(spec.base, spec.max_age_s))
        size = int(max_bytes.get(spec.base, spec.max_bytes))
        if not least_age <= age <= MAX_MAX_AGE_S:
            raise ValueError(
                f"stream_max_age_s {spec.base}: {age:g} s is outside {least_age:g} s (an hour, "
                f"and no less than the duplicate window) to {MAX_MAX_AGE_S:g} s (a year)"
            )
        if not least_bytes <= size <= MAX_MAX_BYTES:
            raise ValueError(
                f"stream_max_bytes {spec.base}: {size} is outside {least_bytes} (16 messages of "
                f"stream_max_message_bytes) to {MAX_MAX_BYTES} (1 TiB)"
            )
        out[spec.base] = StreamLimits(age, size)
    return out


def stream_for(namespace: Namespace, logical_subject: str) -> str:
    """The namespaced name of the stream that stores a logical subject."""
    for spec in EVENT_STREAMS:
        if any(subject_matches(pattern, logical_subject) for pattern in spec.subjects):
            return namespace.stream(spec.base)
    raise ValueError(f"no stream stores subject {logical_subject!r}")


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, a final ``>`` one or more."""
    p_tokens, s_tokens = pattern.split("."), subject.split(".")
    for i, p in enumerate(p_tokens):
        if p == ">":
            return len(s_tokens) > i
        if i >= len(s_tokens) or (p not in ("*", s_tokens[i])):
            return False
    return len(p_tokens) == len(s_tokens)


def stream_config(namespace: Namespace, spec: StreamSpec, policy: StreamPolicy) -> StreamConfig:
    """The nats-py configuration for one declared stream."""
    limits = policy.limits_of(spec)
    subjects = (
        [namespace.wire(s) for s in spec.subjects]
        if spec.namespaced_subjects
        else list(spec.subjects)
    )
    return StreamConfig(
        name=namespace.stream(spec.base),
        description=spec.description,
        subjects=subjects,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=policy.replicas,
        max_age=limits.max_age_s,
        max_bytes=limits.max_bytes,
        duplicate_window=policy.duplicate_window_s,
        max_msg_size=policy.max_msg_bytes,
        discard=DiscardPolicy.OLD,
        allow_direct=True,
    )


def consumer_config(namespace: Namespace, spec: ConsumerSpec) -> ConsumerConfig:
    """The nats-py configuration for one declared consumer."""
    filters = [namespace.wire(s) if spec.namespaced_filters else s for s in spec.filter_subjects]
    return ConsumerConfig(
        durable_name=namespace.durable(spec.durable),
        description=spec.description or None,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=spec.ack_wait_s,
        max_deliver=spec.max_deliver,
        backoff=list(spec.redelivery_backoff_s) or None,
        filter_subject=filters[0] if len(filters) == 1 else None,
        filter_subjects=filters if len(filters) > 1 else None,
        max_ack_pending=spec.max_ack_pending,
        **spec.extra,
    )


# Fields compared by the self-check: the ones whose drift would break delivery guarantees.
_STREAM_FIELDS = (
    "subjects",
    "retention",
    "storage",
    "num_replicas",
    "duplicate_window",
    "max_msg_size",
    "discard",
)
# Limits: settings, so a live stream whose limits differ is updated to them, not refused.
_LIMIT_FIELDS = ("max_age", "max_bytes")
_CONSUMER_FIELDS = (
    "ack_policy",
    "ack_wait",
    "max_deliver",
    "backoff",
    "filter_subject",
    "filter_subjects",
    "max_ack_pending",
    "deliver_policy",
)


async def _reserving(call: Awaitable[Any], want: StreamConfig) -> None:
    """Create or update a stream, explaining a byte limit the server cannot reserve."""
    try:
        await call
    except APIError as exc:
        if exc.err_code != JS_INSUFFICIENT_RESOURCES:
            raise
        raise ConfigurationError(
            f"nats-server cannot reserve {want.max_bytes} bytes for stream {want.name} "
            f"({exc.description}): lower LOCKSTEP_STREAM_MAX_BYTES for it or give JetStream "
            "more storage (max_file_store)"
        ) from None


async def _creating(call: Awaitable[Any], what: str) -> None:
    """Create a missing stream or consumer; say so in one line when this identity may not.

    Streams and consumers are the administrator's to create (bus_access): a service's own
    identity may only read them, and the server drops its create call, which times out."""
    try:
        await call
    except NatsTimeout:
        raise ConfigurationError(
            f"{what} does not exist and this identity may not create it: provision the topology "
            "as the admin identity first (`lockstep up` does; elsewhere `lockstep topology "
            "apply`)"
        ) from None


def diff_config(want: Any, have: Any, fields: Iterable[str]) -> list[str]:
    """Human-readable differences between a declared and a live configuration."""
    out = []
    for name in fields:
        w, h = getattr(want, name), getattr(have, name)
        if not _same(w, h):
            out.append(f"{name}: declared {_show(w)}, live {_show(h)}")
    return out


def _same(want: Any, have: Any) -> bool:
    if isinstance(want, float) or isinstance(have, float):
        return want is not None and have is not None and math.isclose(want, have, rel_tol=1e-6)
    if isinstance(want, list) and isinstance(have, list):
        if want and isinstance(want[0], float):
            return len(want) == len(have) and all(map(_same, want, have))
        return sorted(want) == sorted(have)
    if want in (None, []) and have in (None, []):
        return True
    return bool(want == have)


def _show(value: Any) -> str:
    return str(getattr(value, "value", value))


async def ensure_topology(
    js: JetStreamContext,
    namespace: Namespace,
    policy: StreamPolicy,
    consumers: Sequence[ConsumerSpec] = (),
) -> None:
    """Create what is missing; update live streams' limits to ``policy.limits`` (when given);
    refuse to run when anything else live differs from the declaration.

    Raises:
        TopologyMismatch: listing every stream or consumer field that differs.
        ConfigurationError: nats-server cannot reserve a stream's byte limit.
    """
    problems: list[str] = []
    for spec in (*EVENT_STREAMS, advisory_stream(namespace)):
        want = stream_config(namespace, spec, policy)
        try:
            info = await js.stream_info(str(want.name))
        except NotFoundError:
            await _creating(_reserving(js.add_stream(want), want), f"stream {want.name}")
            continue
        differs = diff_config(want, info.config, _STREAM_FIELDS)
        problems += [f"stream {want.name}: {d}" for d in differs]
        limits = diff_config(want, info.config, _LIMIT_FIELDS)
        if policy.limits is not None and limits and not differs:
            # Only the limits differ: keep the live configuration and set the configured limits
            # (anything else we would not change, and the mismatch is reported below).
            update = dataclasses.replace(
                info.config, max_age=want.max_age, max_bytes=want.max_bytes
            )
            try:
                await _reserving(js.update_stream(update), want)
            except NatsTimeout:
                # A service identity may not change a live stream (bus_access: only admin);
                # the server drops the call, so it times out.
                raise ConfigurationError(
                    f"stream {want.name}: the settings give limits {limits} and this identity "
                    "may not change a live stream: apply them as the admin identity "
                    "(`lockstep up` does at start; elsewhere `lockstep topology apply`), or set "
                    "the settings to the live limits"
                ) from None
            log.warning("stream %s: limits updated to the settings (%s)", want.name, limits)
    for cspec in consumers:
        cwant = consumer_config(namespace, cspec)
        stream = namespace.stream(cspec.stream)
        try:
            cinfo = await js.consumer_info(stream, str(cwant.durable_name))
        except NotFoundError:
            await _creating(
                js.add_consumer(stream, cwant), f"consumer {stream}/{cwant.durable_name}"
            )
            continue
        problems += [
            f"consumer {stream}/{cwant.durable_name}: {d}"
            for d in diff_config(cwant, cinfo.config, _CONSUMER_FIELDS)
        ]
    if problems:
        raise TopologyMismatch(
            "JetStream is configured differently from what this build declares; fix or delete "
            "the live objects (e.g. `nats stream edit`) and restart:\n  " + "\n  ".join(problems)
        )
