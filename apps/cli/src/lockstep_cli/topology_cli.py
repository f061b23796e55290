"""``lockstep topology apply``: JetStream streams and consumers, for an external deployment."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from lockstep_cli.cli_io import fail, settings_of, stdout_console
from lockstep_cli.stack_start import chosen_services

topology_app = typer.Typer(help="JetStream streams and consumers.", no_args_is_help=True)
console = stdout_console()


@topology_app.command("apply")
def topology_apply(
    service: Annotated[
        list[str] | None,
        typer.Option("--service", "-s", help="Only these services' consumers (repeatable)."),
    ] = None,
) -> None:
    """Create the streams and every service's consumers, as the admin identity.

    Services may only read their streams and consumers; `lockstep up` provisions them itself,
    an external deployment runs this once (and after changing stream limits or consumer
    settings) with the admin's variables: eval "$(lockstep env --as admin)". What exists with
    another configuration is reported, not changed (exit 3).
    """
    import nats.errors

    from lockstep_cli.supervisor import StackSettings, provision_topology, service_app
    from lockstep_common.errors import ConfigurationError
    from lockstep_common.subjects import Namespace

    names = chosen_services(service)
    settings = settings_of(StackSettings, "admin")  # or the local stack's admin
    apps = [service_app(name, {}) for name in names]
    try:
        asyncio.run(provision_topology(settings.nats_access(), Namespace(settings.namespace), apps))
    except ConfigurationError as exc:
        fail(str(exc), code=3)
    except nats.errors.TimeoutError:
        # The server drops a call this identity may not make; it shows as a timeout.
        fail(
            "the server did not answer a JetStream call: is this the admin identity? "
            '(eval "$(lockstep env --as admin)")',
            code=3,
        )
    except (OSError, nats.errors.Error) as exc:
        fail(f"NATS unreachable: {type(exc).__name__} {exc}", code=3)
    console.print(f"streams and the consumers of {', '.join(names)} are in place")
