"""``mcp-supervisor login SERVER`` and ``logout SERVER``: a person authorizes an OAuth server once.

``login`` runs the authorization-code flow of the SDK (``workers.oauth.make_auth``) from a terminal:
it connects to the server as the worker would, and when the server asks for authorization it prints
the authorization URL (and opens a browser when there is one), then takes the authorization server's
redirect whichever way it comes first:

- on the loopback port of the server's ``redirectUri`` (``http://127.0.0.1:33418/callback`` unless
  the config says otherwise), where the browser is sent after the person allows access;
- or pasted on stdin: the whole URL the browser was sent to (on a machine without a browser, e.g.
  over SSH, the page will not load, but its address bar has the code).

The tokens go to the server's token file (``supervisor.security.tokens``). A supervisor that runs and holds
the server in ``needs-login`` (or ``failed``) is told to start it. ``logout`` deletes the token file
and restarts a running server, which then needs a login again.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import webbrowser
from contextlib import suppress
from typing import Final
from urllib.parse import parse_qs, urlsplit

import trio

from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.cli.output import print_json
from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorUnreachableError
from supervisor.config.load import ConfigError, ServerSpec, load_config
from supervisor.security.tokens import TokenFile

__all__ = ["Redirect", "cmd_login", "cmd_logout", "parse_redirect"]

MAX_REQUEST: Final = 16 * 1024  # bytes of a redirect request's head read on the loopback port
REQUEST_TIMEOUT: Final = 10.0  # seconds a connection to the loopback port may take to send it
LOOPBACK_HOSTS: Final = {"127.0.0.1": "127.0.0.1", "localhost": "127.0.0.1", "[::1]": "::1", "::1": "::1"}
DONE_PAGE: Final = (
    b"<!doctype html><title>mcp-supervisor</title><p>Done: the authorization went to mcp-supervisor. "
    b"You can close this tab.</p>"
)


class Redirect:
    """What an authorization server's redirect carried: a code and state, or an error."""

    def __init__(self, code: str | None, state: str | None, iss: str | None, error: str | None) -> None:
        self.code, self.state, self.iss, self.error = code, state, iss, error


def parse_redirect(text: str) -> Redirect | None:
    """The redirect in a pasted URL (or its query alone); None when it carries neither code nor error."""
    text = text.strip()
    query = urlsplit(text).query if "://" in text or text.startswith("/") else text.lstrip("?")
    values = parse_qs(query)

    def one(key: str) -> str | None:
        found = values.get(key)
        return found[0] if found else None

    if one("code") is None and one("error") is None:
        return None
    error = one("error")
    if error is not None:
        description = one("error_description")
        error = f"{error}: {description}" if description else error
    return Redirect(one("code"), one("state"), one("iss"), error)


def _server(args: argparse.Namespace) -> ServerSpec:
    """The named server of the config, which must be a remote one with ``"oauth"``."""
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from exc
    spec = config.servers.get(args.server)
    if spec is None:
        why = next((p.message for p in config.problems if p.server == args.server), None)
        if why is not None:
            raise CliError(f"{config.path}: {why}", ExitCode.USAGE)
        known = ", ".join(config.servers) or "none"
        raise CliError(f"{config.path}: no server named {args.server!r} (servers: {known})", ExitCode.USAGE)
    if spec.oauth is None or spec.url is None:
        raise CliError(
            f'server {spec.name!r} has no "oauth" in {config.path}: only remote servers with "oauth" log in',
            ExitCode.USAGE,
        )
    return spec


def cmd_login(args: argparse.Namespace) -> int:
    spec = _server(args)
    assert spec.oauth is not None and spec.url is not None
    if spec.oauth.grant != "authorization_code":
        print(
            f"server {spec.name!r} uses the {spec.oauth.grant} grant: it needs no login, "
            "its worker gets its tokens"
        )
        return 0
    file = TokenFile(spec.name, spec.url)
    try:
        tools = trio.run(_login, spec, file, args)
    except KeyboardInterrupt:
        raise CliError("login interrupted; nothing was stored") from None
    expires = file.expires_at()
    left = f"; the access token expires in {expires - time.time():.0f} s" if expires else ""
    print(f"logged in to {spec.name!r}: {tools} tools; tokens kept in {file.path}{left}")
    print(_tell_supervisor(args, spec.name, "start"))
    return 0


def cmd_logout(args: argparse.Namespace) -> int:
    """Forget a server's tokens; ``--json``: ``{"server", "forgot", "token_file", "supervisor"}``."""
    spec = _server(args)
    assert spec.url is not None
    file = TokenFile(spec.name, spec.url)
    forgot = file.remove()
    told = _tell_supervisor(args, spec.name, "restart")
    if args.json:
        print_json({"server": spec.name, "forgot": forgot, "token_file": str(file.path), "supervisor": told})
        return 0
    if forgot:
        print(f"forgot the tokens of {spec.name!r} ({file.path})")
    else:
        print(f"no tokens were kept for {spec.name!r}")
    print(told)
    return 0


def _tell_supervisor(args: argparse.Namespace, name: str, what: str) -> str:
    """After login, start a server held in needs-login (or failed); after logout, restart a running one.
    What happened, in a sentence."""
    try:
        with SupervisorClient(args.endpoint, request_timeout=3.0, keys=args.keys) as sup:
            row = next((row for row in sup.status() if row.server == name), None)
            if row is None:
                return f"the running supervisor has no server {name!r} (reload it to add it)"
            if what == "start" and row.state in ("needs-login", "failed"):
                sup.start(name)
                return f"server {name!r} is starting (it was {row.state})"
            if what == "restart" and row.state not in ("stopped", "needs-login"):
                sup.restart(name)
                return f"server {name!r} restarted: it needs 'mcp-supervisor login {name}' now"
            return f"server {name!r} is {row.state}"
    except SupervisorUnreachableError:
        return "no supervisor is running; the tokens are used when it starts"


# ---------------------------------------------------------------- the flow


async def _login(spec: ServerSpec, file: TokenFile, args: argparse.Namespace) -> int:
    """Connect to the server with the interactive flow; the number of tools it lists."""
    from mcp import Client  # the SDK, for this command only
    from mcp.shared.auth import AuthorizationCodeResult

    from workers.oauth import make_auth
    from workers.remote import HttpTrouble, LoginNeeded, connect_remote

    assert spec.oauth is not None
    redirect_uri = spec.oauth.redirect_uri
    send, receive = trio.open_memory_channel[Redirect](8)
    async with trio.open_nursery() as nursery:
        listening = await _listen(nursery, redirect_uri, send.clone())
        if not args.no_paste:
            nursery.start_soon(_read_pasted, send.clone())

        async def show(url: str) -> None:
            opened = not args.no_browser and await trio.to_thread.run_sync(_open_browser, url)
            ways = [f"the browser is sent to {redirect_uri} when you allow access"] if listening else []
            if not args.no_paste:
                ways.append(
                    "or paste here the whole URL the browser ends up at (even if its page fails to load)"
                )
            print(
                f"\nTo authorize mcp-supervisor for {spec.name!r}, "
                f"{'the browser opened' if opened else 'open'}:\n\n  {url}\n\n{'; '.join(ways)}.",
                file=sys.stderr,
                flush=True,
            )

        async def redirected() -> AuthorizationCodeResult:
            with trio.move_on_after(args.timeout) as waited:
                redirect = await receive.receive()
            if waited.cancelled_caught:
                raise LoginNeeded(f"no authorization arrived within {args.timeout:g} s")
            if redirect.error is not None:
                raise LoginNeeded(f"the authorization server refused: {redirect.error}")
            assert redirect.code is not None
            print("authorization received; getting the tokens", file=sys.stderr, flush=True)
            return AuthorizationCodeResult(code=redirect.code, state=redirect.state, iss=redirect.iss)

        auth = make_auth(spec, file, redirect_handler=show, callback_handler=redirected, fresh=True)
        trouble = HttpTrouble()
        failure: str | None = None
        try:
            async with Client(connect_remote(spec, trouble, auth)) as client:
                tools = len((await client.list_tools()).tools)
        except* LoginNeeded as group:
            failure = str(_first(group))
        except* Exception as group:
            failure = trouble.explain(_first(group))
        nursery.cancel_scope.cancel()  # the loopback port and the paste reader
    if failure is not None:
        raise CliError(f"login failed: {failure}")
    file.update(scope_needed=None)
    return tools


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first


async def _listen(nursery: trio.Nursery, redirect_uri: str, send: trio.MemorySendChannel[Redirect]) -> bool:
    """Serve the redirect URI's loopback port, if it is one and free; whether it is served."""
    parts = urlsplit(redirect_uri)
    host = LOOPBACK_HOSTS.get(parts.hostname or "") if parts.scheme == "http" else None
    if host is None or parts.port is None:
        return False
    try:
        listeners = await trio.open_tcp_listeners(parts.port, host=host)
    except OSError as exc:
        print(
            f"cannot listen on {host}:{parts.port} ({exc.strerror}); paste the URL instead", file=sys.stderr
        )
        return False
    path = parts.path or "/"

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            with trio.move_on_after(REQUEST_TIMEOUT):
                head = b""
                while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST:
                    data = await stream.receive_some(4096)
                    if not data:
                        return
                    head += data
                line = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
                target = line[1] if len(line) == 3 and line[0] == "GET" else ""
                redirect = parse_redirect(target) if urlsplit(target).path == path else None
                if redirect is None:
                    await stream.send_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    return
                body = DONE_PAGE
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                with suppress(trio.WouldBlock):  # more redirects than anyone waits for: dropped
                    send.send_nowait(redirect)

    nursery.start_soon(trio.serve_listeners, handle, listeners)
    return True


async def _read_pasted(send: trio.MemorySendChannel[Redirect]) -> None:
    """Lines pasted on stdin, until one is a redirect URL; complaints about the others."""
    while True:
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line:
            return  # no stdin (or it closed): the loopback port is the only way
        if not line.strip():
            continue
        redirect = parse_redirect(line)
        if redirect is None:
            print(
                "that has no ?code= in it: paste the whole address the browser was sent to", file=sys.stderr
            )
            continue
        with suppress(trio.WouldBlock):
            send.send_nowait(redirect)


def _open_browser(url: str) -> bool:
    """Open ``url`` in a browser when there is a display to show one on."""
    if sys.platform != "darwin" and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False
