"""Who a request to the HTTP facade comes from: the principal its credentials prove.

Above: the facade's handlers (the SDK's and the fast lane's), which read it from the request's ASGI
scope (``principal_of``) to choose the caller's view and limits (``supervisor.facade.access``). Below:
nothing; ``supervisor.facade.run.Front`` puts it in the scope once the request's credentials are
checked (a bearer token of the token files, or an access token verified as the OAuth protected
resource). Over stdio, or over HTTP with ``--no-auth``, there is no principal: ``ANONYMOUS``.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = ["ANONYMOUS", "PRINCIPAL", "Principal", "principal_of"]

PRINCIPAL: Final = "mcp_supervisor.principal"  # the key of the request's Principal in its ASGI scope

Via = Literal["none", "token", "jwt", "introspection"]


@dataclass(frozen=True, slots=True)
class Principal:
    """``name``: a bearer token's name (a ``clients`` entry's, else ``token-N``, its line among the
    tokens), or the ``sub`` of a verified access token; ``via``: how it was proved; ``claims``: the
    verified token's claims (a JWT's, or an introspection's answer), none for a bearer token;
    ``scopes``: the token's scopes; ``expires_at``: seconds since the epoch, None when it has none."""

    name: str
    via: Via
    claims: Mapping[str, Any] = field(default_factory=dict)
    scopes: frozenset[str] = frozenset()
    expires_at: float | None = None


ANONYMOUS: Final = Principal("", "none")


def principal_of(scope: MutableMapping[str, Any] | Mapping[str, Any]) -> Principal:
    """The principal ``Front`` found for the request of ``scope``, else ``ANONYMOUS``."""
    found = scope.get(PRINCIPAL)
    return found if isinstance(found, Principal) else ANONYMOUS
