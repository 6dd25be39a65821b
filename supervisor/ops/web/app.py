"""The listener's paths: the page, the metrics, the status as JSON, the live feed, and the controls.

Above: the HTTP server (``supervisor.ops.web.http``), which hands every whole request to ``App.handle``.
Below: a ``Backend`` (``supervisor.ops.web.site`` reads a running supervisor): what the paths show and do.

    GET  /                                   the status page (one static file; no external requests)
    GET  /metrics                            Prometheus text exposition
    GET  /api/status                         every server's status row, with its last minute of calls
    GET  /events                             Server-Sent Events: state, registry, stats (every second)
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
from supervisor.ops.web.http import Request, Response, Streaming
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
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
)
_GET_PATHS: Final = frozenset(
    {"/", "/index.html", "/metrics", "/api/status", "/events", "/healthz", "/readyz"}
)
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


class App:
    """Answers each request from its method and path."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def handle(self, request: Request) -> Response | Streaming:
        host = request.headers.get("host", "")
        if not self._backend.hosts.allows(host):  # a page on another origin, through DNS rebinding
            why = f"Host {host!r} does not name this listener (a name of your own goes in statusHosts)"
            return _error(HTTPStatus.MISDIRECTED_REQUEST, why)
        if request.method == "POST":
            return self._post(request)
        if request.method not in ("GET", "HEAD"):
            if request.path in _GET_PATHS or _control(request.path) is not None:
                return _error(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here")
            return _not_found(request.path)
        match request.path:
            case "/" | "/index.html":
                return Response(200, _page(), "text/html; charset=utf-8", _PAGE_HEADERS)
            case "/metrics":
                body, content_type = self._backend.metrics(request.headers.get("accept", ""))
                return Response(200, body, content_type)
            case "/api/status":
                return Response(200, self._backend.status(), _JSON)
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
                return _not_found(request.path)

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
            if request.path in _GET_PATHS:
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


def _error(status: int, message: str) -> Response:
    return Response(status, msgspec.json.encode({"error": message}), _JSON)


def _not_found(path: str) -> Response:
    shown = path if len(path) <= 80 else path[:80] + "..."
    return _error(HTTPStatus.NOT_FOUND, f"nothing at {shown}")


@cache
def _page() -> bytes:
    return importlib.resources.files("supervisor.ops.web").joinpath("page.html").read_bytes()
