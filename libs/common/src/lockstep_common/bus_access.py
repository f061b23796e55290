"""Who may do what on the bus: the NATS permission matrix, derived from what the code declares.

Deny by default (nats-server "Authorization": an identity with an ``allow`` list may use nothing
else). Each identity is granted exactly:
- the event subjects it produces (a service's ``router.EMITS``; the CLI's and node agents' sends
  from ``schemadocs.CHANNELS``), and, for a consuming service, the dead-letter copies of what it
  consumes (``dlq.<consumed subject>``, which its relay publishes);
- for each durable it pulls from: read it, fetch (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>``)
  and acknowledge (``$JS.ACK.<stream>.<durable>.>``), and get a stored message by sequence (the
  advisory watcher); and read (never create, update, purge or delete) the declared streams.
  Streams and consumers are the administrator's to create (reliability.md 5.1): a service
  allowed to create its own durable could make it a push consumer whose deliver subject is any
  subject, which nats-server does not check against the creator's rights (nats-server #8274),
  and so publish where it may not;
- its own inbox (``_INBOX_<identity>.>``): replies and JetStream deliveries to anyone else cannot
  be read;
- a request subject it answers (``admission.check``), with ``allow_responses``: it may reply only
  to a request it received, and nobody else may publish into a requester's inbox, so a rogue
  subscriber can neither hear nor answer an admission check.
Node agents have one identity each (``agent-<node>``, issue 26): the matrix holds their grants
as a template in the node's and site's place-holders (``<site>``, ``<node>``), and
``node_agent`` fills one node in: it may publish its own ``telemetry.observed.*.<site>.<node>``
only and read its own inbox, so a node's credential speaks for that node and no other; the
server refuses the rest.
The ``reader`` identity is for the people and tools that follow events (platform teams on
drift, SREs on gate verdicts, audit on bundles): it hears the subjects ``schemadocs.CHANNELS``
gives outside readers, as they are published, and may read their streams' stored messages one by
one (``STREAM.MSG.GET``, ``DIRECT.GET``), but creates no consumer (a durable for a team is the
administrator's to create). The ``admin`` identity manages streams and consumers (the whole
JetStream API) and may publish any subject of the namespace: ``lockstep dlq replay``
republishes dead letters on their original subjects. JetStream API subjects are those of the
nats-server JetStream API reference (``$JS.API.STREAM.*``, ``$JS.API.CONSUMER.*``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lockstep_common.identities import (
    ADMIN,
    AGENT,
    CLI,
    NODE_PLACEHOLDER,
    READER,
    SITE_PLACEHOLDER,
    agent_identity,
)
from lockstep_common.natsconn import inbox_prefix
from lockstep_common.subjects import Namespace, dead_letter, ops_requests_of, token

# Outside senders named in schemadocs.CHANNELS -> the identity they connect as. A scheduler's
# admission check runs `lockstep fleet admit`, an operator's tool; the BMC sweeper runs inside
# inventory and publishes nothing.
SENDER_IDENTITIES: Mapping[str, tuple[str, ...]] = {
    "cli": (CLI,),
    "schedulers": (CLI,),
    "node-agent": (AGENT,),
    "bmc-sweeper": (),
    # Already granted the whole namespace (admin_permissions); named so that its sends are
    # producers the consumers accept (provenance.PRODUCERS), never a party of its own.
    "admin": (ADMIN,),
    # Operator commands are granted per identity (OPERATORS), never as the channel's pattern:
    # `ops.*.inventory.fleet.remove` would let one identity ask in another's name.
    "operators": (),
}
# The identities that ask the services operator commands (``lockstep fleet list``...): each may
# publish only under its own ``ops.<identity>.>`` (``subjects.ops_requests_of``), so the
# answering service knows who asked from the subject, checked by the server, and decides what
# that identity may run (``lockstep_common.operator``: the reader reads, the cli also writes).
OPERATORS: tuple[str, ...] = (CLI, READER)


@dataclass(frozen=True, slots=True)
class Durable:
    """One durable pull consumer, by its wire names."""

    stream: str
    durable: str


@dataclass(frozen=True, slots=True)
class Party:
    """What one identity does on the bus, in logical subjects (namespaced when granted).

    Args:
        sends: subject patterns it publishes (events, and requests it makes).
        consumes: the durables it pulls from.
        dead_letters: subject patterns whose dead-letter copies it publishes.
        answers: request subjects it answers.
        streams: stream names whose configuration it may read (the start-up self-check).
        hears: subject patterns it may subscribe to as they are published.
        reads: stream names whose stored messages it may get one by one.
    """

    sends: tuple[str, ...] = ()
    consumes: tuple[Durable, ...] = ()
    dead_letters: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()
    streams: tuple[str, ...] = ()
    hears: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Permissions:
    """One identity's grants, as nats-server's ``permissions`` block spells them."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    responds: bool = False
    publish_deny: tuple[str, ...] = ()
    """Subjects refused even where ``publish`` allows them (nats-server: deny wins)."""


def _sorted(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(items)))


def jetstream_grants(durables: Iterable[Durable], streams: Iterable[str]) -> list[str]:
    """The JetStream API calls a consumer of ``durables`` needs, and nothing more."""
    out = [f"$JS.API.STREAM.INFO.{stream}" for stream in streams]
    for d in durables:
        out += [
            f"$JS.API.CONSUMER.INFO.{d.stream}.{d.durable}",
            f"$JS.API.CONSUMER.MSG.NEXT.{d.stream}.{d.durable}",
            f"$JS.ACK.{d.stream}.{d.durable}.>",
            # The advisory watcher copies a dead-lettered message by its stream sequence.
            f"$JS.API.STREAM.MSG.GET.{d.stream}",
            f"$JS.API.DIRECT.GET.{d.stream}",
        ]
    return out


def permissions(namespace: Namespace, identity: str, party: Party) -> Permissions:
    """The grants of ``identity`` doing what ``party`` declares."""
    publish = [namespace.wire(s) for s in party.sends]
    publish += [namespace.wire(dead_letter(s)) for s in party.dead_letters]
    publish += jetstream_grants(party.consumes, party.streams)
    for stream in party.reads:
        publish += [
            f"$JS.API.STREAM.INFO.{stream}",
            f"$JS.API.STREAM.MSG.GET.{stream}",
            f"$JS.API.DIRECT.GET.{stream}",
            f"$JS.API.DIRECT.GET.{stream}.>",
        ]
    subscribe = [f"{inbox_prefix(identity)}.>"]
    subscribe += [namespace.wire(s) for s in (*party.answers, *party.hears)]
    return Permissions(_sorted(publish), _sorted(subscribe), responds=bool(party.answers))


def node_agent(template: Permissions, site: str, node: str) -> Permissions:
    """The grants of ``node``'s agent at ``site``: the agents' template (``matrix()[AGENT]``)
    with the place-holders filled in. A grant with a wildcard where the template has a
    place-holder is impossible: both are checked subject tokens (ValueError otherwise)."""
    token(site, "site")
    token(node, "node id")

    def fill(subject: str) -> str:
        parts = subject.split(".")
        filled = [{SITE_PLACEHOLDER: site, NODE_PLACEHOLDER: node}.get(p, p) for p in parts]
        return ".".join(filled).replace(inbox_prefix(AGENT), inbox_prefix(agent_identity(node)))

    return Permissions(
        tuple(fill(s) for s in template.publish),
        tuple(fill(s) for s in template.subscribe),
        template.responds,
    )


def admin_permissions(namespace: Namespace) -> Permissions:
    """Stream and consumer management, and republishing dead letters: the namespace's
    subjects, less those no dead letter is ever republished on and where a send would speak
    for someone else: a command to a node's agent (the updater's alone, after its guard and
    fence: an admin's would reach a node beyond the canary around both) and an operator
    command in another identity's name (the admin asks in its own, ``ops.admin.>``)."""
    return Permissions(
        publish=("$JS.>", f"{namespace.name}.>"),
        subscribe=(f"{inbox_prefix(ADMIN)}.>",),
        publish_deny=(
            namespace.wire("agent.command.>"),
            *(namespace.wire(ops_requests_of(identity)) for identity in OPERATORS),
        ),
    )


def matrix(namespace: Namespace, parties: Mapping[str, Party]) -> dict[str, Permissions]:
    """Every identity's grants: ``parties`` (services and outside senders) plus ``admin``."""
    if ADMIN in parties:
        raise ValueError(f"{ADMIN!r} is reserved for stream and consumer management")
    out = {name: permissions(namespace, name, party) for name, party in sorted(parties.items())}
    out[ADMIN] = admin_permissions(namespace)
    return out


def access_markdown(grants: Mapping[str, Permissions]) -> str:
    """``bus-access.md``: the permission matrix, generated (``lockstep docs generate``)."""
    lines = [
        "# Who may do what on the bus",
        "",
        "Generated from the code by `lockstep docs generate` (`lockstep_common.bus_access`, the",
        "services' routers and `schemadocs.CHANNELS`); `lockstep up` writes exactly this into the",
        "embedded nats-server's configuration. Everything not listed is denied. Subjects are",
        "shown for the default namespace `lockstep`.",
        "",
        "Every connection is TLS (the embedded stack's own CA, `<data-dir>/nats/tls/ca.pem`)",
        "with a user name and a password read from `<data-dir>/secrets/<identity>/nats-password`",
        "(mode 0600; the server keeps only bcrypt hashes). `lockstep env --as IDENTITY` prints",
        "the variables a process needs (`LOCKSTEP_NATS_URL`, `_USER`, `_PASSWORD_FILE`,",
        "`_CA_FILE`).",
        "",
        f"Node agents have one identity per node, `{AGENT}`: the row below is their template,",
        "filled in with the node's site and id (`bus_access.node_agent`). `lockstep agent enroll",
        "NODE...` makes a node's nkey (an Ed25519 key pair): the seed is written for the operator",
        "to install on the node (mode 0600), the server is given the public key only and checks",
        'a signature of its nonce on each connection (nats-server "NKeys" authentication), so no',
        "secret of an agent is held by the server. `lockstep agent revoke NODE` removes the key",
        "and reloads the server's configuration: the node's connection is closed and refused",
        "from then on, every other connection stays up. Why configuration-file nkey users and not",
        'JWT accounts: see "Node agents\' identities" in [architecture.md](architecture.md).',
        "",
        "The embedded server's own system account (`SYS`, user `system`) is not in this table:",
        "it answers the stack's health checks and monitoring requests",
        "(`$SYS.REQ.SERVER.PING.<endpoint>`) in place of the HTTP monitor, which would show",
        "every connection and subscription to anyone on the machine, and is not served.",
        "",
        "| identity | may publish | may subscribe | answers requests |",
        "|---|---|---|---|",
    ]
    for identity, p in grants.items():
        publish = "<br>".join(
            [f"`{s}`" for s in p.publish] + [f"except `{s}`" for s in p.publish_deny]
        )
        subscribe = "<br>".join(f"`{s}`" for s in p.subscribe)
        answers = "yes" if p.responds else ""
        lines.append(f"| `{identity}` | {publish} | {subscribe} | {answers} |")
    return "\n".join(lines) + "\n"
