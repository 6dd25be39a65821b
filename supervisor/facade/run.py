"""Running the facade: over stdio (``mcp-supervisor mcp``) or streamable HTTP (``serve --http``).

Above: the CLI (``supervisor.cli``). Below: the facade (``supervisor.facade.server``) and its link
to the supervisor (``supervisor.facade.upstream``), and the SDK's transports: ``stdio_server`` for a
host that starts the facade as its MCP server, and the SDK's streamable HTTP app on uvicorn.

Over stdio, stdout is the protocol: logs go to stderr, and the facade ends when the host closes its
stdin; a line the SDK's transport cannot read is answered all the same (``supervisor.facade.pipes``).
Over HTTP,
every request needs ``Authorization: Bearer <token>`` with one of the tokens (compared in constant
time), unless told to run without; the port is bound to 127.0.0.1 unless another host is named.
"""

from __future__ import annotations

import hmac
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final, cast

import anyio
import anyio.abc
from mcp.shared.message import SessionMessage

from supervisor.facade.launch import Launcher
from supervisor.facade.pipes import claimed_stdio, sift
from supervisor.facade.server import Facade, FacadeOptions
from supervisor.facade.upstream import Upstream
from supervisor.keys import Keys

__all__ = ["MCP_PATH", "BearerAuth", "bind", "http_app", "serve_http", "serve_stdio"]

log = logging.getLogger("mcp_supervisor.facade")

MCP_PATH: Final = "/mcp"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _facade(
    options: FacadeOptions, endpoint: str | None, keys: Keys, launcher: Launcher | None
) -> tuple[Facade, Upstream]:
    facade = Facade(options)
    upstream = Upstream(
        endpoint, keys=keys, changed=facade.changed, launcher=launcher, list_wait=options.list_wait
    )
    facade.upstream = upstream
    return facade, upstream


async def serve_stdio(
    options: FacadeOptions, endpoint: str | None, keys: Keys = None, launcher: Launcher | None = None
) -> None:
    """Serve one host on this process's stdin and stdout until it closes stdin."""
    from mcp.server.stdio import stdio_server

    facade, upstream = _facade(options, endpoint, keys, launcher)
    async with anyio.create_task_group() as tasks:
        await tasks.start(facade.tell_hosts)
        await tasks.start(upstream.run)
        with claimed_stdio() as (stdin, stdout):  # trio's own pipes: no thread per line (see pipes)
            async with (
                stdio_server(cast(Any, stdin), cast(Any, stdout)) as (read_stream, write_stream),
                anyio.create_task_group() as lines,
            ):
                to_server, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                lines.start_soon(sift, read_stream, to_server, write_stream)
                await facade.server.run(messages, write_stream, facade.initialization_options())
                lines.cancel_scope.cancel()
        log.info("the host closed the connection")
        tasks.cancel_scope.cancel()


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <one of tokens>`` get 401."""

    def __init__(self, app: ASGIApp, tokens: Sequence[str]) -> None:
        if not tokens or any(not token for token in tokens):
            raise ValueError("bearer authentication needs at least one non-empty token")
        self._app = app
        self._tokens = [token.encode() for token in tokens]

    def allows(self, header: bytes | None) -> bool:
        if header is None or header[:7].lower() != b"bearer ":
            return False
        offered = header[7:].strip()
        allowed = False
        for token in self._tokens:  # every token compared, in constant time each
            allowed |= hmac.compare_digest(offered, token)
        return allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if not self.allows(headers.get(b"authorization")):
                body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="mcp-supervisor"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


def http_app(facade: Facade, host: str, tokens: Sequence[str] | None) -> ASGIApp:
    """The SDK's streamable HTTP app for ``facade`` at ``/mcp`` (behind ``BearerAuth`` with ``tokens``)."""
    app: ASGIApp = facade.server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    return app if tokens is None else BearerAuth(app, tokens)


LISTEN_BACKLOG: Final = 2048  # uvicorn's own default; it calls listen() again with it


def bind(host: str, port: int) -> socket.socket:
    """The listening socket: bound and listening before serving, so that port 0 can say which port it
    got, and a host that connects the moment the ``LISTENING`` line appears is queued by the kernel
    until the server accepts (rather than refused)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it every
    # response waits for the host's delayed ACK (Nagle: some 40 ms a request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def serve_http(
    options: FacadeOptions,
    endpoint: str | None,
    sock: socket.socket,
    tokens: Sequence[str] | None,
    keys: Keys = None,
    launcher: Launcher | None = None,
    log_level: str = "warning",
) -> None:
    """Serve streamable HTTP at ``/mcp`` on ``sock`` until cancelled (on asyncio, as uvicorn is)."""
    import uvicorn

    host = sock.getsockname()[0]
    facade, upstream = _facade(options, endpoint, keys, launcher)
    config = uvicorn.Config(http_app(facade, host, tokens), log_level=log_level, lifespan="on")
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tasks:
        await tasks.start(facade.tell_hosts)
        await tasks.start(upstream.run)
        await server.serve(sockets=[sock])
        tasks.cancel_scope.cancel()
