"""Cross-origin requests to the HTTP facade, for the pages of the origins a gateway file names.

Off unless configured: without ``cors.origins`` no response carries an ``Access-Control-*`` header, so
a browser lets no page of another origin read an answer, and ``SameOrigin`` refuses a request whose
``Origin`` is another site's (403). With them, a request from one of those origins passes the
``Origin`` check (its ``Host`` is still checked), its preflight (``OPTIONS``) is answered before any
authentication (browsers send none with it), and its responses name the origin and expose the
headers an MCP client reads (``Mcp-Session-Id``, ``WWW-Authenticate``, ``Retry-After``).

Above: ``supervisor.facade.run.Front``. Below: nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any, Final

__all__ = ["Cors"]

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

METHODS: Final = b"GET, POST, DELETE, OPTIONS"
EXPOSED: Final = b"Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate, Retry-After"
# Request headers a page may send (and any Mcp-* one: Mcp-Method, Mcp-Name, Mcp-Param-*).
ALLOWED: Final = frozenset(
    {"authorization", "content-type", "accept", "last-event-id", "mcp-session-id", "mcp-protocol-version"}
)
MAX_AGE: Final = b"600"  # seconds a browser may keep a preflight's answer


class Cors:
    """The origins whose pages may call the facade (``scheme://host[:port]``, lower case)."""

    def __init__(self, origins: Sequence[str]) -> None:
        self._origins = frozenset(origin.encode("latin-1").lower() for origin in origins)

    def __bool__(self) -> bool:
        return bool(self._origins)

    def allows(self, origin: bytes | None) -> bool:
        return origin is not None and origin.lower() in self._origins

    async def preflight(self, headers: Mapping[bytes, bytes], send: Send) -> None:
        """The answer to an allowed origin's ``OPTIONS``: 204 naming what it may send, or 403 naming a
        request header it may not."""
        asked = headers.get(b"access-control-request-headers", b"").decode("latin-1")
        names = [name.strip().lower() for name in asked.split(",") if name.strip()]
        refused = [name for name in names if name not in ALLOWED and not name.startswith("mcp-")]
        if refused:
            body = b'{"error": "request header %s is not allowed"}' % refused[0].encode("latin-1")
            fields = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 403, "headers": fields})
            await send({"type": "http.response.body", "body": body})
            return
        fields = [
            *self._named(headers[b"origin"]),
            (b"access-control-allow-methods", METHODS),
            (b"access-control-max-age", MAX_AGE),
            (b"content-length", b"0"),
        ]
        if names:
            fields.append((b"access-control-allow-headers", ", ".join(names).encode("latin-1")))
        await send({"type": "http.response.start", "status": 204, "headers": fields})
        await send({"type": "http.response.body", "body": b""})

    def sending(self, origin: bytes, send: Send) -> Send:
        """``send``, with the response's head naming ``origin`` (an allowed one)."""
        named = self._named(origin)

        async def send_named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *named]}
            await send(message)

        return send_named

    @staticmethod
    def _named(origin: bytes) -> list[tuple[bytes, bytes]]:
        return [
            (b"access-control-allow-origin", origin),
            (b"access-control-expose-headers", EXPOSED),
            (b"vary", b"Origin"),
        ]
