"""The HTTP facade's credentials: which principal a request's ``Authorization`` header proves.

Above: ``supervisor.facade.run.Front``, which asks ``principal`` for every request (and answers 401
with ``refuse`` when there is none) and puts the principal in the request's scope. Below: the
principal (``supervisor.facade.principal``).

Bearer tokens are named: a ``clients`` entry's token by the entry's name, a token of ``--token-file``
or ``$MCP_SUPERVISOR_TOKEN`` as ``token-N`` (its place among them). Every token is compared, in
constant time each; no token's value is ever logged or shown.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from supervisor.facade.principal import Principal

__all__ = ["BearerAuth"]

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class BearerAuth:
    """The listener's bearer tokens, by name: a request without ``Authorization: Bearer <one of them>``
    has no principal, and gets 401."""

    def __init__(self, tokens: Sequence[str] | Mapping[str, str]) -> None:
        named = tokens if isinstance(tokens, Mapping) else {f"token-{n}": t for n, t in enumerate(tokens, 1)}
        if not named or any(not token for token in named.values()):
            raise ValueError("bearer authentication needs at least one non-empty token")
        self._tokens = [(token.encode(), Principal(name, "token")) for name, token in named.items()]

    def principal(self, header: bytes | None) -> Principal | None:
        """The principal of the token ``header`` carries, None when it carries none of ours."""
        if header is None or header[:7].lower() != b"bearer ":
            return None
        offered = header[7:].strip()
        found = None
        for token, principal in self._tokens:  # every token compared, in constant time each
            if hmac.compare_digest(offered, token):
                found = principal
        return found

    def allows(self, header: bytes | None) -> bool:
        return self.principal(header) is not None

    @staticmethod
    async def refuse(send: Send) -> None:
        """401, saying how to authenticate."""
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
