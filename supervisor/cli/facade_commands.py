"""The facade's commands: ``mcp`` (stdio), ``serve --http`` and ``host-config``.

None has ``--json``: ``mcp`` and ``serve`` are servers (their output is the MCP protocol, or nothing),
and ``host-config`` prints the entry to paste into a host's config (JSON already, for most hosts).

Above: ``supervisor.cli.main``, whose ``build_parser`` adds their arguments (``add_facade_parsers``)
and runs the command. Below: ``supervisor.facade.run`` (loaded only when a facade runs: the SDK's
server side is not loaded by the other commands); for ``mcp``, first ``supervisor.facade.handshake``,
which answers the host's first request before the SDK is loaded: ``mcp`` checks its arguments and
answers without loading the SDK, trio or ZeroMQ. This module is loaded to parse every command, so it
loads none of those at import.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.facade.hosts import HOSTS, Launch, entry, where
from supervisor.shared.paths import log_beside, resolve_endpoint

if TYPE_CHECKING:
    from supervisor.config.gateway import Gateway
    from supervisor.facade.launch import Launcher
    from supervisor.facade.server import FacadeOptions

__all__ = [
    "TOKEN_ENV",
    "add_facade_parsers",
    "cmd_host_config",
    "cmd_mcp",
    "cmd_serve",
    "parse_listen",
]

TOKEN_ENV: Final = "MCP_SUPERVISOR_TOKEN"  # bearer tokens for `serve --http`, comma-separated


def _check(args: argparse.Namespace) -> None:
    """The options' values, checked before the facade reads or loads anything."""
    from supervisor.protocol import MAX_LIST_WAIT

    if args.timeout is not None and not args.timeout > 0:
        raise CliError(f"--timeout must be a positive number of seconds, not {args.timeout}", ExitCode.USAGE)
    if not 0 <= args.list_wait <= MAX_LIST_WAIT:
        raise CliError(
            f"--list-wait must be 0 to {MAX_LIST_WAIT:g} seconds, not {args.list_wait}", ExitCode.USAGE
        )
    if args.config and not Path(args.config).expanduser().is_file():
        raise CliError(f"--config {args.config}: no such file", ExitCode.USAGE)
    if args.config and len(args.members) > 1:
        raise CliError("--config starts one supervisor: it cannot go with several", ExitCode.USAGE)
    if args.server:
        if args.search:
            raise CliError("--server and --search do not go together (--server keeps names)", ExitCode.USAGE)
        if args.servers and {s.strip() for s in args.servers.split(",") if s.strip()} != {args.server}:
            raise CliError(
                f"--server {args.server} serves that server only: leave out --servers", ExitCode.USAGE
            )


def _options(args: argparse.Namespace) -> FacadeOptions:
    from supervisor.facade.server import FacadeOptions
    from supervisor.facade.views import View

    servers = frozenset(s.strip() for s in args.servers.split(",") if s.strip()) if args.servers else None
    globs = tuple(g.strip() for value in args.tools or () for g in value.split(",") if g.strip())
    single = args.server or None
    if single is not None:
        servers = frozenset({single})
    view = View(servers=servers, tools=globs)
    return FacadeOptions(
        view=view,
        search=args.search,
        timeout=args.timeout,
        list_wait=args.list_wait,
        single=single,
        fast=not args.no_fast_path,
    )


def _launcher(args: argparse.Namespace) -> Launcher | None:
    if not args.config:
        return None
    from supervisor.facade.launch import Launcher

    config = Path(args.config).expanduser()
    log_path = log_beside(resolve_endpoint(args.endpoint))
    return Launcher(config, endpoint=args.endpoint, keys=args.keys, log_path=log_path)


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)-7s %(name)s: %(message)s", stream=sys.stderr
    )


def _load_stdio() -> None:
    """What serving stdio loads: the SDK, trio, the client stub (while waiting for the host's first line)."""
    import supervisor.facade.run  # noqa: F401


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the registry as an MCP server on stdin/stdout, until the host closes stdin. The host's
    first request is answered before the SDK is loaded (``supervisor.facade.handshake``)."""
    from supervisor.facade.handshake import first_answer

    _logging(args.log_level)
    _check(args)
    opening = first_answer(_load_stdio)

    import anyio

    from supervisor.facade.run import serve_stdio

    options, launcher = _options(args), _launcher(args)
    anyio.run(serve_stdio, options, args.members, args.keys, launcher, opening, backend="trio")
    return 0


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[::1]:PORT`` or ``:PORT`` (127.0.0.1)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdecimal() or int(port) > 65535:
        raise CliError(f"--http {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8765", ExitCode.USAGE)
    return host or "127.0.0.1", int(port)


def _gateway(args: argparse.Namespace) -> Gateway | None:
    """The gateway file of ``--gateway``, or None; its problems are usage errors naming it."""
    if not args.gateway:
        return None
    from supervisor.config.gateway import GatewayError, load_gateway

    try:
        return load_gateway(args.gateway)
    except GatewayError as exc:
        raise CliError(f"--gateway {exc}", ExitCode.USAGE) from exc


def _tokens(args: argparse.Namespace, gateway: Gateway | None = None) -> list[str] | None:
    if args.no_auth:
        if gateway is not None:
            raise CliError("--no-auth and --gateway: a gateway's clients need authentication", ExitCode.USAGE)
        return None
    tokens: list[str] = []
    if args.token_file:
        try:
            text = Path(args.token_file).expanduser().read_text()
        except OSError as exc:
            raise CliError(f"--token-file: {exc}", ExitCode.USAGE) from exc
        tokens += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    tokens += [t.strip() for t in os.environ.get(TOKEN_ENV, "").split(",") if t.strip()]
    if gateway is not None and (gateway.oauth is not None or any(c.token for c in gateway.clients or ())):
        return tokens  # the gateway's tokens, or its access tokens, authenticate
    if not tokens:
        raise CliError(
            f"serve --http needs bearer tokens: --token-file FILE (one per line) or ${TOKEN_ENV} "
            "(comma-separated); --no-auth serves without (anyone who reaches the port can call every tool)",
            ExitCode.USAGE,
        )
    return tokens


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the registry as an MCP server over streamable HTTP at http://HOST:PORT/mcp."""
    import anyio

    from supervisor.config.model import ConfigError
    from supervisor.facade.run import MCP_PATH, bind, serve_http

    _logging(args.log_level)
    host, port = parse_listen(args.http)
    _check(args)
    gateway = _gateway(args)
    options, launcher, tokens = _options(args), _launcher(args), _tokens(args, gateway)
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise CliError(f"--http {args.http}: cannot listen: {exc}", ExitCode.USAGE) from exc
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    auth = "NO authentication" if tokens is None else "bearer tokens"
    if gateway is not None and gateway.oauth is not None:
        try:  # the resource's URL, when not given, is the listener's (on loopback only)
            oauth = gateway.oauth.for_listener(bound_host, bound_port, gateway.path)
        except ConfigError as exc:
            sock.close()
            raise CliError(f"--gateway {exc}", ExitCode.USAGE) from exc
        gateway = replace(gateway, oauth=oauth)
        auth = f"OAuth access tokens of {oauth.issuer}" + (" and bearer tokens" if tokens else "")
    print(f"LISTENING http://{shown}:{bound_port}{MCP_PATH} ({auth})", file=sys.stderr, flush=True)
    if tokens is None:
        logging.getLogger("mcp_supervisor.facade").warning("serving without authentication (--no-auth)")
    anyio.run(
        serve_http,
        options,
        args.members,
        sock,
        tokens,
        args.keys,
        launcher,
        args.log_level,
        args.allow_host or (),
        gateway,
        backend="asyncio",
    )
    return 0


def _command(args: argparse.Namespace) -> list[str]:
    """``mcp-supervisor mcp`` with the options given, by the absolute path a host can start."""
    script = shutil.which("mcp-supervisor")
    beside = Path(sys.executable).with_name("mcp-supervisor")
    if beside.exists():
        script = str(beside)
    command = [script] if script else [sys.executable, "-m", "supervisor"]
    command.append("mcp")
    if args.config:
        command += ["--config", str(Path(args.config).expanduser().resolve())]
    # The endpoint as resolved here, where the user's environment is: a host starts the facade with
    # only a few variables of its own (no XDG_RUNTIME_DIR, no MCP_SUPERVISOR_ENDPOINT).
    command += ["--endpoint", resolve_endpoint(args.endpoint)]
    for flag in ("keys", "servers", "server"):
        value = getattr(args, flag)
        if value:
            command += [f"--{flag}", value]
    for glob in args.tools or ():
        command += ["--tools", glob]
    if args.search:
        command.append("--search")
    return command


def cmd_host_config(args: argparse.Namespace) -> int:
    """Print the config entry that adds the facade to an MCP host."""
    if args.url and args.host == "claude-desktop":
        raise CliError(
            "Claude Desktop's config file starts local servers only: leave out --url to use "
            "'mcp-supervisor mcp', which reaches the supervisor on this machine",
            ExitCode.USAGE,
        )
    launch = Launch(url=args.url, token_env=args.token_env) if args.url else Launch(command=_command(args))
    name = args.name or args.server or "mcp-supervisor"
    print(entry(args.host, name, launch))
    print(f"\n{where(args.host)}", file=sys.stderr)
    return 0


def add_facade_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The ``mcp``, ``serve`` and ``host-config`` subcommands; ``common``: the parent of --endpoint and
    --keys."""
    view = argparse.ArgumentParser(add_help=False)
    view.add_argument(
        "--config",
        metavar="FILE",
        help="when no supervisor answers, start one for FILE in the background (it outlives this command, "
        "so a host's restart does not restart the servers; its log is in the runtime directory)",
    )
    view.add_argument(
        "--servers", metavar="A,B", help="show only these servers' tools, resources and prompts"
    )
    view.add_argument(
        "--server",
        metavar="NAME",
        help="serve only server NAME, under its own tool and prompt names (no mcp_NAME_ prefix): a host "
        "config that names them works unchanged, with the server supervised",
    )
    view.add_argument(
        "--tools",
        metavar="GLOB",
        action="append",
        help="show only tools whose prefixed name matches GLOB (e.g. 'mcp_git_*'; repeat or comma-separate)",
    )
    view.add_argument(
        "--search",
        action="store_true",
        help="list two tools instead of the registry: search_tools (ranked search of names, descriptions and "
        "arguments) and call_tool (call one by name); for registries too large for a model's context",
    )
    view.add_argument(
        "--timeout", type=float, help="seconds a call may take (default: the server's toolTimeout)"
    )
    view.add_argument(
        "--list-wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a host's first listing may wait for the supervisor to answer and for its servers' "
        "first starts to be over, so that a host that lists once sees every tool (default 30)",
    )
    view.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    view.add_argument(
        "--no-fast-path",
        action="store_true",
        help="answer tools/call and tools/list through the MCP SDK's server like every other request, "
        "not on the facade's own fast path (the same answers, slower; for comparing and troubleshooting)",
    )

    mcp = sub.add_parser(
        "mcp",
        parents=[common, view],
        help="serve the registry as one MCP server on stdio (for Claude Desktop, Cursor, VS Code ...)",
        description="Serve the supervisor's registry as one MCP server on stdin/stdout, for an MCP host that "
        'starts it as a server: {"command": "mcp-supervisor", "args": ["mcp"]}. Calls are routed '
        "through the running supervisor (found as the other commands find it) with its deadlines; the "
        "host hears list_changed when tools change, and the facade reconnects when the supervisor restarts. "
        "Logs go to stderr. 'mcp-supervisor host-config HOST' prints the entry for a host.",
    )
    mcp.set_defaults(func=cmd_mcp)

    serve = sub.add_parser(
        "serve",
        parents=[common, view],
        help="serve the registry as one MCP server over streamable HTTP (for agents elsewhere)",
        description="Serve the supervisor's registry as one MCP server over streamable HTTP at "
        "http://HOST:PORT/mcp, for agents on other machines or in containers. Every request needs "
        f"'Authorization: Bearer TOKEN' with a token from --token-file or ${TOKEN_ENV}, or, when the "
        "--gateway file has an oauth block, an OAuth access token its authorization server issued for "
        "this server (the server is then an OAuth protected resource, with its metadata at "
        "/.well-known/oauth-protected-resource/mcp, and needs no --token-file).",
    )
    serve.add_argument(
        "--http",
        required=True,
        metavar="HOST:PORT",
        help="where to listen, e.g. 127.0.0.1:8765 (':PORT' is 127.0.0.1; port 0 picks a free one); a host "
        "other than loopback lets other machines in",
    )
    serve.add_argument(
        "--token-file", metavar="FILE", help="bearer tokens, one per line ('#' starts a comment)"
    )
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without authentication: anyone who can reach the port can call every tool",
    )
    serve.add_argument(
        "--allow-host",
        metavar="NAME",
        action="append",
        help="also answer requests whose Host (and Origin) name NAME (a DNS name of yours, a proxy's); "
        "without it, only the listening address and, on loopback, localhost, 127.0.0.1 and [::1]: any "
        "other Host gets 421 and a foreign Origin 403 (DNS rebinding); repeatable",
    )
    serve.add_argument(
        "--gateway",
        metavar="FILE",
        help="a gateway file (JSON): the clients allowed, each with its own tokens or access-token "
        "subject or group, the servers and tools it sees and its limits; OAuth as a protected resource; "
        "CORS origins (docs/operations/gateway.md)",
    )
    serve.set_defaults(func=cmd_serve)

    hosts = sub.add_parser(
        "host-config",
        help="print the config entry that adds the registry to an MCP host",
        description="Print what to paste into an MCP host's config (for claude-code, also the 'claude mcp "
        "add' command) so that it uses the registry through 'mcp-supervisor mcp', or through a "
        "'serve --http' URL. Says on stderr where it goes.",
    )
    hosts.add_argument("host", choices=HOSTS, help="the MCP host")
    hosts.add_argument(
        "--name",
        help="the server's name in the host (default: mcp-supervisor, or with --server the server's own, so "
        "the host names its tools as before)",
    )
    hosts.add_argument(
        "--config", metavar="FILE", help="add --config FILE (start a supervisor when none answers)"
    )
    hosts.add_argument("--endpoint", help="add --endpoint (a supervisor elsewhere than the default)")
    hosts.add_argument("--keys", metavar="DIR", help="add --keys")
    hosts.add_argument("--servers", metavar="A,B", help="add --servers")
    hosts.add_argument("--server", metavar="NAME", help="add --server (one server under its own names)")
    hosts.add_argument("--tools", metavar="GLOB", action="append", help="add --tools")
    hosts.add_argument("--search", action="store_true", help="add --search")
    hosts.add_argument("--url", help="a 'serve --http' URL (http://HOST:PORT/mcp) instead of a command")
    hosts.add_argument(
        "--token-env",
        metavar="VAR",
        default=TOKEN_ENV,
        help=f"with --url: the environment variable the host takes the token from (default {TOKEN_ENV})",
    )
    hosts.set_defaults(func=cmd_host_config)
