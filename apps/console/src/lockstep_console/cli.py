"""``lockstep console``: the read-only rollout console (issue 32), started by an SRE.

It reads as the ``reader`` identity (``lockstep env --as reader``, or the running ``lockstep
up`` stack's reader secret), refuses any other identity, listens on loopback unless told
otherwise, and beyond loopback refuses to start without TLS and a token file
(``listen.require``; docs/console.md says why a token file).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lockstep_cli.cli_io import fail, settings_of, stderr_console
from lockstep_console.listen import DEFAULT, ListenError, parse, require

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient

    from lockstep_common.settings import ServiceSettings
    from lockstep_console.listen import Listen
    from lockstep_console.nudges import Nudges

log = logging.getLogger(__name__)


def console(
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to serve on.")] = DEFAULT,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="PEM certificate (beyond loopback).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="Its PEM key.")] = None,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="File (mode 0600) holding the login token."),
    ] = None,
    poll: Annotated[
        float, typer.Option("--poll", min=0.2, help="Seconds between progress reads.")
    ] = 2.0,
) -> None:
    """Serve the read-only console: rollouts, a gate's evidence, the fleet (as `reader`)."""
    from lockstep_common.identities import READER
    from lockstep_common.natsconn import AccessError, read_secret
    from lockstep_common.operator_settings import OperatorSettings

    try:
        where = parse(listen)
        require(where, tls_cert, tls_key, token_file)
        secret = read_secret(token_file, "--token-file") if token_file else None
    except (ListenError, AccessError) as exc:
        fail(str(exc))
    settings = settings_of(OperatorSettings, READER)
    if settings.nats_user not in (None, READER):
        fail(
            f"the console reads as `{READER}`, not `{settings.nats_user}`: "
            f"eval $(lockstep env --as {READER})"
        )
    context = None
    if tls_cert is not None and tls_key is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            fail(f"--tls-cert/--tls-key: {exc}")
    scheme = "https" if context else "http"
    stderr_console().print(f"console on {scheme}://{listen} (Ctrl-C stops it)", highlight=False)
    try:
        asyncio.run(serve(settings, where, context, secret, poll))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except OSError as exc:
        fail(f"--listen {listen}: {exc.strerror or exc}", 1)


async def serve(
    settings: ServiceSettings,
    where: Listen,
    context: ssl.SSLContext | None,
    secret: str | None,
    poll_s: float,
) -> None:
    """Serve until cancelled; the bus nudges run beside it (best effort: pages poll anyway)."""
    from aiohttp import web

    from lockstep_console.nudges import Nudges
    from lockstep_console.server import create_app
    from lockstep_console.source import BusSource

    nudges = Nudges()
    app = create_app(BusSource(settings), nudges=nudges, poll_s=poll_s, token_value=secret)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, where.host, where.port, ssl_context=context)
    await site.start()
    # Bound: what ``lockstep up`` waits for (its pid, so that another listener on the port, or
    # an earlier run's line in the same log, is not taken for this process).
    stderr_console().print(f"console serving (pid {os.getpid()})", highlight=False)
    bus = await _subscribe(settings, nudges)
    try:
        await asyncio.Event().wait()
    finally:
        if bus is not None:
            await bus.drain()
        await runner.cleanup()


async def _subscribe(settings: ServiceSettings, nudges: Nudges) -> NatsClient | None:
    """The bus events the reader may read, as nudges (None: no bus now; the pages poll)."""
    from lockstep_common.natsconn import connect
    from lockstep_console.nudges import subscribe

    try:
        nc = await connect(settings.nats_access(), name="lockstep-console")
    except Exception as exc:  # noqa: BLE001 - the pages still poll: say so and go on
        stderr_console().print(f"warning: no live events ({exc}); pages poll", highlight=False)
        return None
    await subscribe(nc, settings.namespace, nudges)
    return nc
