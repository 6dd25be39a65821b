"""Running the facade: over stdio (``mcp-supervisor mcp``) or streamable HTTP (``serve --http``).

Above: the CLI (``supervisor.cli``). Below: the facade (``supervisor.facade.server``) and its link
to the supervisor (``supervisor.facade.upstream``), and the SDK's transports: ``stdio_server`` for a
host that starts the facade as its MCP server, and the SDK's streamable HTTP app on uvicorn.

Over stdio, stdout is the protocol: logs go to stderr, and the facade ends when the host closes its
stdin. A line that is not a JSON-RPC message (not JSON, nested deeper than the SDK decodes, a request
of the wrong shape), which the SDK's transport drops unanswered, is answered with a parse error or an
invalid request naming what is wrong, under the request's id when one can be read (else a host would
wait for ever); a notification or a response is never answered, a blank line is skipped. Over HTTP,
every request needs ``Authorization: Bearer <token>`` with one of the tokens (compared in constant
time), unless told to run without; the port is bound to 127.0.0.1 unless another host is named.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import socket
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from contextlib import suppress
from typing import Any, Final, cast

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from supervisor.facade.launch import Launcher
from supervisor.facade.pipes import claimed_stdio
from supervisor.facade.server import Facade, FacadeOptions
from supervisor.facade.upstream import Upstream
from supervisor.keys import Keys
from supervisor.repeats import Repeats

__all__ = ["MCP_PATH", "BearerAuth", "bind", "http_app", "serve_http", "serve_stdio"]

log = logging.getLogger("mcp_supervisor.facade")

MCP_PATH: Final = "/mcp"
# A JSON token: a string, a punctuation mark, or anything else up to the next one (numbers, literals).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"|[][{}:,]|[^][{}:,\s"]++')

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _facade(
    options: FacadeOptions, endpoint: str | None, keys: Keys, launcher: Launcher | None
) -> tuple[Facade, Upstream]:
    facade = Facade(options)
    upstream = Upstream(endpoint, keys=keys, changed=facade.changed, launcher=launcher)
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
                lines.start_soon(_sift, read_stream, to_server, write_stream)
                await facade.server.run(messages, write_stream, facade.initialization_options())
                lines.cancel_scope.cancel()
        log.info("the host closed the connection")
        tasks.cancel_scope.cancel()


async def _sift(
    from_host: anyio.abc.ObjectReceiveStream[SessionMessage | Exception],
    to_server: anyio.abc.ObjectSendStream[SessionMessage | Exception],
    to_host: anyio.abc.ObjectSendStream[SessionMessage],
) -> None:
    """The host's messages, on to the server; each line that was not one answered here, if it needs
    an answer."""
    repeats = Repeats(log)
    async with to_server:
        async for item in from_host:
            if not isinstance(item, Exception):
                try:
                    await to_server.send(item)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the server is done
                continue
            if _blank(item):
                continue
            answer = bad_line_answer(item)
            why = answer.error.message if answer is not None else str(item).splitlines()[0]
            repeats.log("bad line", logging.WARNING, "the host sent a line that is not JSON-RPC: %.300s", why)
            if answer is not None:
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await to_host.send(SessionMessage(answer))


def bad_line_answer(exc: Exception) -> types.JSONRPCError | None:
    """The answer to a line the SDK's stdio transport could not read as a JSON-RPC message (``exc``
    says why): a parse error or an invalid request, under the request's id when one can be read
    (else null); None for a notification or a response (never answered)."""
    if not isinstance(exc, ValidationError) or not exc.error_count():
        return None
    errors = exc.errors()
    first = errors[0]
    if first["type"] == "json_invalid":  # not JSON, or nested deeper than pydantic decodes
        line = first.get("input")
        request_id = _scanned_id(line) if isinstance(line, str) else None
        return _error_answer(request_id, types.PARSE_ERROR, f"Parse error: {first['msg']}")
    # Valid JSON of the wrong shape: the whole message is the input of a field missing at its top
    # level (or of the top level's own type error); the problem told is the one as a request.
    whole = next((e["input"] for e in errors if e["type"] == "missing" and len(e["loc"]) == 2), None)
    if whole is None:
        whole = next((e["input"] for e in errors if len(e["loc"]) <= 1), None)
    if isinstance(whole, dict):
        notification = "method" in whole and "id" not in whole
        response = "method" not in whole and bool(whole.keys() & {"result", "error"})
        if notification or response:
            return None
    problem = next((e for e in errors if e["loc"][:1] == ("JSONRPCRequest",)), first)
    where = ".".join(str(part) for part in problem["loc"][1:]) or "the message"
    request_id = _request_id(whole.get("id")) if isinstance(whole, dict) else None
    return _error_answer(request_id, types.INVALID_REQUEST, f"Invalid request: {where}: {problem['msg']}")


def _blank(exc: Exception) -> bool:
    line = exc.errors()[0].get("input") if isinstance(exc, ValidationError) and exc.error_count() else None
    return isinstance(line, str) and not line.strip()


def _request_id(value: object) -> int | str | None:
    """``value`` if it can be a JSON-RPC request's id (a string or an integer), else None."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _scanned_id(line: str) -> int | str | None:
    """The ``id`` at the top level of a JSON object that does not decode, read token by token (no
    recursion: nesting of any depth is only counted)."""
    depth, previous = 0, ""
    tokens = (match.group() for match in _TOKEN.finditer(line))
    for token in tokens:
        if not previous and token != "{":
            return None  # not an object: no id
        if token in ("{", "["):
            depth += 1
        elif token in ("}", "]"):
            depth -= 1
        elif depth == 1 and token == '"id"' and previous in ("{", ",") and next(tokens, "") == ":":
            try:
                return _request_id(json.loads(next(tokens, "")))
            except ValueError:
                return None
        previous = token
    return None


def _error_answer(request_id: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


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


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (bound before serving, so that port 0 can say which port it got)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it every
    # response waits for the host's delayed ACK (Nagle: some 40 ms a request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
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
