"""The console's web server (aiohttp): read-only pages rendered on the server, plots as SVG,
live progress by Server-Sent Events (WHATWG HTML, "Server-sent events").

Contract:

- **Only reads**: every route is a GET (but the login form's POST), each answered from the
  ``Source`` (the services' read commands); there is no route that changes anything.
- **No secret in a page**: pages show the services' answers only; the login token is compared
  in constant time and never echoed, and the session cookie is a random id, not the token.
- **Nothing from elsewhere**: styles and the one script are served from the package; the
  Content-Security-Policy allows nothing but this origin (``default-src 'self'``), so a text
  in an answer cannot load or run anything even if it escaped the templates' auto-escaping.
- **Server time is measured**: each response carries ``Server-Timing: app;dur=<ms>`` (W3C
  Server Timing), the time from the request to the page rendered, the bus round trips included.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import jinja2
from aiohttp import web

from lockstep_common.subjects import token
from lockstep_console import pages
from lockstep_console.feeds import Feeds
from lockstep_console.nudges import ANY, Nudges
from lockstep_console.source import Refused, Source, Unavailable

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
COOKIE = "lockstep_console_session"
STATIC = {"console.css": "text/css", "live.js": "text/javascript"}
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
SOURCE: web.AppKey[Source] = web.AppKey("source", Source)
NUDGES: web.AppKey[Nudges] = web.AppKey("nudges", Nudges)
POLL_S: web.AppKey[float] = web.AppKey("poll_s", float)
TOKEN: web.AppKey[str | None] = web.AppKey("token", str)
SESSIONS: web.AppKey[set[str]] = web.AppKey("sessions", set)
FEEDS: web.AppKey[Feeds] = web.AppKey("feeds", Feeds)
TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("lockstep_console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def render(name: str, **context: Any) -> str:
    return TEMPLATES.get_template(name).render(**context)


def page(template: str, code: int = 200, **context: Any) -> web.Response:
    return web.Response(text=render(template, **context), status=code, content_type="text/html")


@web.middleware
async def measured(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    try:
        response = await handler(request)
    except Refused as exc:
        code = 404 if exc.kind == "not_found" else 400
        response = page("error.html", code, title="Not shown", message=exc.reason)
    except Unavailable as exc:
        response = page("error.html", 503, title="Not available", message=str(exc))
    if not response.prepared:
        response.headers.update(HEADERS)
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1e3:.1f}"
    return response


@web.middleware
async def logged_in(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With a token configured, every page but the login form and the styles needs a session
    (a cookie set by the form) or ``Authorization: Bearer <token>``."""
    expected = request.app[TOKEN]
    if expected is None or request.path in ("/login", "/static/console.css"):
        return await handler(request)
    bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if bearer and hmac.compare_digest(bearer.encode(), expected.encode()):
        return await handler(request)
    if request.cookies.get(COOKIE, "") in request.app[SESSIONS]:
        return await handler(request)
    raise web.HTTPSeeOther("/login")


async def login_form(request: web.Request) -> web.Response:
    return page("login.html", failed=False)


async def login(request: web.Request) -> web.Response:
    form = await request.post()
    given = str(form.get("token", ""))
    expected = request.app[TOKEN] or ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return page("login.html", 401, failed=True)
    session = secrets.token_urlsafe(32)
    request.app[SESSIONS].add(session)
    response = web.HTTPSeeOther("/rollouts")
    # Secure whenever served over TLS (always, beyond loopback): a browser would not send a
    # Secure cookie back over plain HTTP on loopback.
    response.set_cookie(COOKIE, session, httponly=True, secure=request.secure, samesite="Strict")
    raise response


def _rollout_id(request: web.Request) -> str:
    raw = request.match_info["rollout"]
    try:
        return token(raw, "rollout id")
    except ValueError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None


async def index(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/rollouts")


async def rollouts(request: web.Request) -> web.Response:
    before = request.query.get("before") or None
    if before is not None:
        try:
            token(before, "before")
        except ValueError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
    answer = await request.app[SOURCE].rollouts(before)
    return page("rollouts.html", title="Rollouts", answer=answer)


async def rollout(request: web.Request) -> web.Response:
    rid = _rollout_id(request)
    source = request.app[SOURCE]
    status, audit, gate = await asyncio.gather(
        source.rollout(rid), source.audit(rid), source.gate(rid)
    )
    if status.rollout is None:
        return page("intent.html", title=f"Rollout {rid}", rid=rid, intent=status.intent)
    return page(
        "rollout.html",
        title=f"Rollout {rid}",
        rid=rid,
        live=pages.progress(status.rollout),
        audit=audit.entries,
        verdicts=gate.verdicts,
    )


async def _progress_html(source: Source, rid: str) -> str:
    status = await source.rollout(rid)
    if status.rollout is None:
        return ""
    return render("progress.html", live=pages.progress(status.rollout))


async def live(request: web.Request) -> web.StreamResponse:
    """The rollout's progress as Server-Sent Events: a ``progress`` event carrying the new
    HTML each time it changed. The rollout's ``Feed`` reads it, once for all its viewers, when
    a bus event about the rollout arrives and every ``poll_s`` in between (a node's step
    outcomes other than failures are not events the reader may read)."""
    rid = _rollout_id(request)
    poll_s = request.app[POLL_S]
    response = web.StreamResponse(
        headers={**HEADERS, "Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    seen = 0
    async with request.app[FEEDS].follow(rid) as feed:
        # A viewer that left is noticed within ``poll_s`` (its own check, not a read).
        while request.transport is not None and not request.transport.is_closing():
            if not await feed.next(seen, poll_s):
                continue
            seen = feed.version
            if not feed.html:
                continue  # no rollout (yet): nothing to show
            data = "".join(f"data: {line}\n" for line in feed.html.splitlines())
            try:
                await response.write(f"event: progress\n{data}\n".encode())
            except ConnectionError:
                break
    return response


async def gate(request: web.Request) -> web.Response:
    rid = _rollout_id(request)
    answer = await request.app[SOURCE].gate(rid)
    return page(
        "gate.html",
        title=f"Gate of {rid}",
        rid=rid,
        verdicts=[pages.gate_view(v) for v in answer.verdicts],
    )


async def fleet(request: web.Request) -> web.Response:
    try:
        number = int(request.query.get("page", "1"))
    except ValueError:
        raise web.HTTPBadRequest(text="page must be a whole number") from None
    after = request.query.get("after") or None
    held_after = request.query.get("quarantined_after") or None
    for value, what in ((after, "after"), (held_after, "quarantined_after")):
        if value is not None:
            try:
                token(value, what)
            except ValueError as exc:
                raise web.HTTPBadRequest(text=str(exc)) from None
    source = request.app[SOURCE]

    async def stragglers() -> tuple[tuple[Any, ...], str]:
        # The healthgate's part of the page: without it, the rest is shown and says so.
        try:
            return (await source.stragglers()).findings, ""
        except (Unavailable, Refused) as exc:
            return (), str(exc)

    async def quarantined() -> tuple[Any, str]:
        # The updater's part of the page: without it, the rest is shown and says so.
        try:
            return await source.quarantined(held_after), ""
        except (Unavailable, Refused) as exc:
            return None, str(exc)

    status, drift, (findings, missing), (held, held_missing) = await asyncio.gather(
        source.fleet_status(), source.drift(after), stragglers(), quarantined()
    )
    view = pages.fleet_view(status, drift, number)
    return page(
        "fleet.html",
        title="Fleet",
        stragglers=findings,
        missing=missing,
        after=after,
        held=held,
        held_after=held_after,
        held_missing=held_missing,
        **view,
    )


async def node(request: web.Request) -> web.Response:
    raw = request.match_info["node"]
    try:
        node_id = token(raw, "node id")
    except ValueError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    answer = await request.app[SOURCE].node_history(node_id)
    return page("node.html", title=f"Node {node_id}", steps=answer.steps)


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    body = resources.files("lockstep_console").joinpath("static", name).read_bytes()
    return web.Response(body=body, content_type=STATIC[name])


def create_app(
    source: Source,
    *,
    nudges: Nudges | None = None,
    poll_s: float = 2.0,
    token_value: str | None = None,
) -> web.Application:
    """The console's pages over ``source``; ``token_value`` set, a login is required."""
    app = web.Application(middlewares=[measured, logged_in])
    app[SOURCE] = source
    app[NUDGES] = nudges or Nudges()
    app[POLL_S] = poll_s
    app[FEEDS] = Feeds(lambda rid: _progress_html(source, rid), app[NUDGES], poll_s)
    app[TOKEN] = token_value
    app[SESSIONS] = set()
    app.router.add_get("/", index)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_get("/rollouts", rollouts)
    app.router.add_get("/rollouts/{rollout}", rollout)
    app.router.add_get("/rollouts/{rollout}/live", live)
    app.router.add_get("/rollouts/{rollout}/gate", gate)
    app.router.add_get("/fleet", fleet)
    app.router.add_get("/nodes/{node}", node)
    app.router.add_get("/static/{name}", static)
    return app


__all__ = ["ANY", "create_app"]
