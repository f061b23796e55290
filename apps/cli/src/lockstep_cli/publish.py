"""Publish one event as the ``cli`` identity and wait for JetStream's acknowledgement: what
``pool set`` sends the planner maintenance windows this way (``rollout start`` asks the planner
``rollout.start`` instead: the cli may not publish an intent, issue 26)."""

from __future__ import annotations

import asyncio

from lockstep_cli.cli_io import fail
from lockstep_common.envelope import EventData
from lockstep_common.natsconn import NatsAccess


async def publish_as_cli(
    access: NatsAccess,
    namespace: str,
    logical_subject: str,
    data: EventData,
    timeout_s: float,
    what: str,
) -> str:
    """Publish ``data`` on ``logical_subject``; its event id. Unreachable NATS or no
    acknowledgement is one line naming ``what`` was not sent (``fail``)."""
    import nats

    from lockstep_common.envelope import make_envelope, source_of
    from lockstep_common.natsconn import AccessError, connect
    from lockstep_common.subjects import Namespace

    subject = Namespace(namespace).wire(logical_subject)
    env = make_envelope(data, source=source_of("cli"))
    try:
        nc = await asyncio.wait_for(
            connect(access, name="lockstep-cli", allow_reconnect=False), timeout_s
        )
    except AccessError as exc:
        fail(str(exc))
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        fail(f"NATS unreachable: {type(exc).__name__} {exc}")
    try:
        await nc.jetstream().publish(
            subject, env.to_json(), timeout=timeout_s, headers={"Nats-Msg-Id": str(env.event_id)}
        )
    except (TimeoutError, nats.errors.Error) as exc:
        fail(f"{what} not acknowledged on {subject}: {type(exc).__name__} {exc}", 1)
    finally:
        await nc.close()
    return str(env.event_id)
