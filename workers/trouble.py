"""What a worker knows of why its remote server failed, and how it says so: without the HTTP stack.

Above: ``workers.session`` (every worker explains a failed session with ``HttpTrouble.explain``),
``workers.remote`` (which feeds ``HttpTrouble`` the HTTP errors it sees) and ``workers.oauth``
(``LoginNeeded``). Below: nothing but the standard library, so a stdio worker loads no HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx2

__all__ = ["HttpTrouble", "LoginNeeded", "login_hint"]


def login_hint(server: str) -> str:
    """What to run when an OAuth server needs a person (``workers.oauth``)."""
    return f"run 'mcp-supervisor login {server}'"


class LoginNeeded(Exception):
    """Only a person can authorize the server now (``workers.oauth``); ``why`` says why, with no
    secret in it."""

    def __init__(self, why: str, hint: str = "") -> None:
        super().__init__(f"{why}; {hint}" if hint else why)
        self.why = why


class HttpTrouble:
    """The last HTTP error status a server answered with, and the last transport failure:
    the SDK's errors do not carry them."""

    def __init__(self) -> None:
        self.last: str | None = None
        self.broken: str | None = None

    def note(self, error: BaseException) -> None:
        """A transport failure the SDK reported beside the session (a dropped connection)."""
        self.broken = f"{type(error).__name__}: {error}"

    def cause(self, url: str | None) -> str:
        """`` (what went wrong)``, from what was noted; else where the server was, for remote ones."""
        known = "; ".join(filter(None, (self.broken, self.last)))
        if not known and url:
            known = f"HTTP connection to {urlsplit(url).hostname}:{urlsplit(url).port or 'default port'}"
        return f" ({known})" if known else ""

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.last = (
                f"HTTP {response.status_code} {response.reason_phrase} from {response.request.url.host}"
            )

    def explain(self, error: BaseException) -> str:
        text = f"{type(error).__name__}: {error}"
        return f"{text} ({self.last})" if self.last else text
