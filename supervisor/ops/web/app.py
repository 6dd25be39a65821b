"""The listener's paths: the console, the metrics, the status as JSON, the live feed, and the controls.

Above: the HTTP server (``supervisor.ops.web.http``), which hands every whole request to ``App.handle``.
Below: a ``Backend`` (``supervisor.ops.web.site`` reads a running supervisor): what the paths show and do.

    GET  /                                   the console (one static page, its script and style
    GET  /page.css, /page.js, /views.js        files; no build step, no external requests)
    GET  /metrics                            Prometheus text exposition
    GET  /api/status                         every server's status row, with its last minute of calls
    GET  /api/history                        each server's 60 statusBucket buckets: calls, errors, p50, p99
    GET  /api/timeline                       crashes, restarts, stops, starts, reloads: newest first
    GET  /api/servers/NAME                   one server's status row, tools and recent log lines
    GET  /api/audit?since=&identity=&tool=&limit=   the audit trail's records, newest first
    GET  /api/identities                     who has called, per identity (from the audit trail)
    GET  /events                             Server-Sent Events: state, registry, timeline, stats
    GET  /healthz                            200 ``ok`` while the event loop answers (liveness)
    GET  /readyz                             200 ``ok`` once ready, else 503 saying why (readiness)
    POST /api/servers/NAME/restart|stop|start  as ``mcp-supervisor restart|stop|start NAME``

Every request must have a ``Host`` header naming this listener (``HostCheck``: its address, loopback
names on loopback, the names in ``statusHosts``), else 421: a page on another origin that rebinds
its DNS name to this address reads nothing. GET and HEAD only, but for the controls. The controls
answer 403 unless ``statusControls`` is on, and even then only a request that (1) names this
listener, (2) has no ``Origin`` header, or the page's own (no cross-site form or fetch), and
(3) carries ``X-Requested-By: mcp-supervisor``, which the page's script sends and a cross-site
request cannot send without a CORS preflight that this listener never grants.
"""

from __future__ import annotations

import importlib.resources
from functools import cache
from http import HTTPStatus
from typing import Any, Final, Literal, Protocol
from urllib.parse import unquote

import msgspec

from supervisor.ops.web.feed import Subscription
from supervisor.ops.web.http import Deferred, Request, Response, Streaming
from supervisor.ops.web.query import QueryError, audit_query
from supervisor.shared.address import HostCheck

__all__ = ["ACTIONS", "CONTROL_HEADER", "CONTROL_VALUE", "Action", "App", "Backend"]

Action = Literal["restart", "stop", "start"]
ACTIONS: Final[tuple[Action, ...]] = ("restart", "stop", "start")
CONTROL_HEADER: Final = "x-requested-by"
CONTROL_VALUE: Final = "mcp-supervisor"
_JSON: Final = "application/json"
_PAGE_HEADERS: Final = (
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("x-content-type-options", "nosniff"),
)
_STATIC: Final = {  # the page's files (package data), by path
    "/": ("page.html", "text/html; charset=utf-8"),
    "/index.html": ("page.html", "text/html; charset=utf-8"),
    "/page.css": ("page.css", "text/css; charset=utf-8"),
    "/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/views.js": ("views.js", "text/javascript; charset=utf-8"),
}
_GET_PATHS: Final = frozenset(
    {
        *_STATIC,
        "/metrics",
        "/api/status",
        "/api/history",
        "/api/timeline",
        "/api/audit",
        "/api/identities",
        "/events",
        "/healthz",
        "/readyz",
    }
)
_NO_AUDIT: Final = "no audit trail"
_OK: Final = b"ok\n"
_TEXT: Final = "text/plain; charset=utf-8"


class Backend(Protocol):
    """What the paths need of the supervisor."""

    @property
    def hosts(self) -> HostCheck:
        """Which ``Host`` headers name this listener."""
        ...

    def status(self) -> bytes:
        """``/api/status`` as JSON."""
        ...

    def unready(self) -> dict[str, Any] | None:
        """None when ready (serving its front door, every server's first start over); else why not, as
        ``/readyz``'s 503 body: ``reason``, and the servers still ``starting`` for the first time."""
        ...

    def metrics(self, accept: str) -> tuple[bytes, str]:
        """The exposition for that ``Accept`` header, and its content type."""
        ...

    def controls(self) -> bool:
        """Whether ``statusControls`` is on (as the last reload left it)."""
        ...

    def operate(self, action: Action, server: str) -> str | None:
        """Restart, stop or start ``server``; None when done, else why not (an unknown name)."""
        ...

    def subscribe(self) -> Subscription | None:
        """A live feed for one client; None when too many have one."""
        ...

    def history(self) -> bytes:
        """``/api/history`` as JSON: ``{"bucket", "end", "servers": {NAME: {"calls", "errors", "p50",
        "p99"}}}``, each list a bucket, oldest first."""
        ...

    def timeline(self) -> bytes:
        """``/api/timeline`` as JSON: ``{"events": [{"time", "server", "kind", "detail"}]}``, newest first."""
        ...

    def server(self, name: str) -> bytes | str:
        """``/api/servers/NAME`` as JSON (``server``, ``status``, ``tools``, ``logs``); or, for a name no
        server has, why not."""
        ...

    async def audit(
        self, since: float | None, identity: str | None, tool: str | None, limit: int
    ) -> dict[str, Any] | None:
        """``/api/audit``: the audit trail's newest ``limit`` records of the last ``since`` seconds (None:
        any age), of ``identity``, of tools matching the glob ``tool``; None without an audit trail
        (read from its files: awaited)."""
        ...

    def identities(self) -> dict[str, Any] | None:
        """``/api/identities``: every identity the audit trail has seen; None without an audit trail."""
        ...


class App:
    """Answers each request from its method and path."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def handle(self, request: Request) -> Response | Streaming | Deferred:
        host = request.headers.get("host", "")
        if not self._backend.hosts.allows(host):  # a page on another origin, through DNS rebinding
            why = f"Host {host!r} does not name this listener (a name of your own goes in statusHosts)"
            return _error(HTTPStatus.MISDIRECTED_REQUEST, why)
        if request.method == "POST":
            return self._post(request)
        if request.method not in ("GET", "HEAD"):
            if request.path in _GET_PATHS or _control(request.path) or _server(request.path):
                return _error(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here")
            return _not_found(request.path)
        if request.path in _STATIC:
            name, content_type = _STATIC[request.path]
            return Response(200, _static(name), content_type, _PAGE_HEADERS)
        match request.path:
            case "/metrics":
                body, content_type = self._backend.metrics(request.headers.get("accept", ""))
                return Response(200, body, content_type)
            case "/api/status":
                return Response(200, self._backend.status(), _JSON)
            case "/api/history":
                return Response(200, self._backend.history(), _JSON)
            case "/api/timeline":
                return Response(200, self._backend.timeline(), _JSON)
            case "/api/audit":
                return self._audit(request)
            case "/api/identities":
                return _found(self._backend.identities())
            case "/healthz":
                return Response(200, _OK, _TEXT)
            case "/readyz":
                unready = self._backend.unready()
                if unready is None:
                    return Response(200, _OK, _TEXT)
                return Response(HTTPStatus.SERVICE_UNAVAILABLE, msgspec.json.encode(unready) + b"\n", _JSON)
            case "/events":
                return self._events(request)
            case _:
                if _control(request.path) is not None:
                    return _error(HTTPStatus.METHOD_NOT_ALLOWED, "the controls take POST")
                server = _server(request.path)
                if server is not None:
                    return self._server(server)
                return _not_found(request.path)

    def _server(self, encoded: str) -> Response:
        try:
            name = unquote(encoded, errors="strict")
        except UnicodeDecodeError:
            return _error(HTTPStatus.BAD_REQUEST, "the server name is not UTF-8")
        answer = self._backend.server(name)
        if isinstance(answer, str):
            return _error(HTTPStatus.NOT_FOUND, answer)
        return Response(200, answer, _JSON)

    def _audit(self, request: Request) -> Response | Deferred:
        try:
            query = audit_query(request.query)
        except QueryError as exc:
            return _error(HTTPStatus.BAD_REQUEST, str(exc))

        async def answer() -> Response:
            return _found(await self._backend.audit(query.since, query.identity, query.tool, query.limit))

        return Deferred(answer)

    def _events(self, request: Request) -> Response | Streaming:
        if request.method == "HEAD":
            return Response(200, b"", "text/event-stream")
        subscription = self._backend.subscribe()
        if subscription is None:
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, "too many clients of /events; try again later")
        return Streaming(subscription, "text/event-stream")

    def _post(self, request: Request) -> Response:
        control = _control(request.path)
        if control is None:
            if request.path in _GET_PATHS or _server(request.path) is not None:
                return _error(HTTPStatus.METHOD_NOT_ALLOWED, "POST is only for the controls")
            return _not_found(request.path)
        if not self._backend.controls():
            why = 'the controls are off (set "statusControls": true in the "supervisor" settings)'
            return _error(HTTPStatus.FORBIDDEN, why)
        refusal = self._refusal(request)
        if refusal is not None:
            return _error(HTTPStatus.FORBIDDEN, refusal)
        encoded, action = control
        try:
            name = unquote(encoded, errors="strict")
        except UnicodeDecodeError:
            return _error(HTTPStatus.BAD_REQUEST, "the server name is not UTF-8")
        refused = self._backend.operate(action, name)
        if refused is not None:
            return _error(HTTPStatus.NOT_FOUND, refused)
        return Response(200, msgspec.json.encode({"ok": True, "server": name, "action": action}), _JSON)

    def _refusal(self, request: Request) -> str | None:
        """Why a control request may not be from this listener's own page; None when it is."""
        host = request.headers.get("host", "")
        if not self._backend.hosts.allows(host):
            return f"Host {host!r} does not name this listener"
        origin = request.headers.get("origin")
        if origin is not None and origin.lower() != f"http://{host.strip().lower()}":
            return f"cross-origin request refused (Origin {origin!r})"
        if request.headers.get(CONTROL_HEADER) != CONTROL_VALUE:
            return f"the controls need the header {CONTROL_HEADER.title()}: {CONTROL_VALUE}"
        return None


def _control(path: str) -> tuple[str, Action] | None:
    """``(NAME, action)`` of ``/api/servers/NAME/ACTION`` (NAME still percent-encoded), else None."""
    parts = path.split("/")
    if len(parts) != 5 or parts[:3] != ["", "api", "servers"] or not parts[3]:
        return None
    action = next((known for known in ACTIONS if known == parts[4]), None)
    return None if action is None else (parts[3], action)


def _server(path: str) -> str | None:
    """NAME of ``/api/servers/NAME`` (still percent-encoded), else None."""
    parts = path.split("/")
    if len(parts) != 4 or parts[:3] != ["", "api", "servers"] or not parts[3]:
        return None
    return parts[3]


def _found(answer: dict[str, Any] | None) -> Response:
    """An audit trail's answer; 404 when there is no audit trail."""
    if answer is None:
        return _error(HTTPStatus.NOT_FOUND, _NO_AUDIT)
    return Response(200, msgspec.json.encode(answer), _JSON)


def _error(status: int, message: str) -> Response:
    return Response(status, msgspec.json.encode({"error": message}), _JSON)


def _not_found(path: str) -> Response:
    shown = path if len(path) <= 80 else path[:80] + "..."
    return _error(HTTPStatus.NOT_FOUND, f"nothing at {shown}")


@cache
def _static(name: str) -> bytes:
    return importlib.resources.files("supervisor.ops.web").joinpath(name).read_bytes()
