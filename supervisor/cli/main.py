"""The ``mcp-supervisor`` command: its arguments, and what each one runs.

``run`` hands over to ``supervisor.daemon.lifecycle``; every other command is a ``cmd_*`` function of
``supervisor.cli.supervisor_commands`` (``logs`` and ``shutdown``, with their arguments, of
``supervisor.cli.daemon_commands``). This module only parses, dispatches and turns errors into exit
codes: the table of ``supervisor.cli.exit_codes``, which ``--help`` shows. With ``--json`` a failure (a
usage error too) is printed as the command's JSON document (``supervisor.cli.output``); without it,
as one line on stderr.

A command's module is loaded when that command runs, not to parse the arguments: the parser loads
no client stub, no ZeroMQ, no trio and no MCP SDK, so ``mcp`` (which a host starts, and waits for)
loads only what its first answer needs (``supervisor.facade.handshake``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import NoReturn

from supervisor import __version__
from supervisor.cli.daemon_commands import add_daemon_parsers
from supervisor.cli.exit_codes import CliError, ExitCode, exit_code_for, exit_codes_help
from supervisor.cli.facade_commands import TOKEN_ENV, cmd_host_config, cmd_mcp, cmd_serve
from supervisor.cli.output import print_failure
from supervisor.facade.hosts import HOSTS
from supervisor.shared.paths import DEFAULT_KEY_DIR, ENDPOINT_ENV, KEYS_ENV, resolve_endpoint

__all__ = ["build_parser", "main"]

Command = Callable[[argparse.Namespace], int]


def _later(module: str, name: str) -> Command:
    """The command ``name`` of ``module``, which is loaded when the command runs."""

    def run(args: argparse.Namespace) -> int:
        command: Command = getattr(importlib.import_module(module), name)
        return command(args)

    run.__name__ = run.__qualname__ = name
    return run


def _command(name: str) -> Command:
    """A ``cmd_*`` function of ``supervisor.cli.supervisor_commands`` (the client stub's commands)."""
    return _later("supervisor.cli.supervisor_commands", name)


def cmd_run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(message)s",
        stream=sys.stderr,
    )
    from supervisor.daemon import (
        lifecycle as daemon,  # the supervisor's own modules: not loaded by the other commands
    )

    try:
        daemon.run(
            args.config,
            args.endpoint,
            keys=args.keys,
            insecure=args.insecure,
            metrics=args.metrics,
            tracing=args.tracing,
        )
    except daemon.StartError as exc:
        raise CliError(str(exc), ExitCode.USAGE if exc.usage else ExitCode.FAILED) from exc
    return 0


# ---------------------------------------------------------------- parser

NO_JSON = ("run", "mcp", "serve", "host-config", "login")  # servers, a config snippet, a person's login


class _UsageError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser, self.message = parser, message


class _Parser(argparse.ArgumentParser):
    """Bad usage raises ``_UsageError`` (instead of exiting), so that ``main`` reports it as every
    other failure is reported: in JSON with ``--json``."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(self, message)


def _epilog() -> str:
    start = (
        "Start with 'mcp-supervisor run config/mcp.json', then in another shell 'mcp-supervisor wait' "
        "and 'mcp-supervisor tools'."
    )
    json_note = (
        f"--json (every command but {', '.join(NO_JSON)}): stdout carries one JSON document (one JSON "
        "object per line for 'events' and 'logs -f'); a failure is "
        '{"error": {"code": ..., "message": ...}} there, with the exit code below.'
    )
    return f"{textwrap.fill(start, 100)}\n\n{textwrap.fill(json_note, 100)}\n\n{exit_codes_help()}"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--endpoint",
        help=f"the supervisor's ZeroMQ endpoint (default: ${ENDPOINT_ENV}, else {resolve_endpoint(None)})",
    )
    common.add_argument(
        "--keys",
        metavar="DIR",
        help=f"CURVE key directory for tcp:// endpoints (default: ${KEYS_ENV}, else {DEFAULT_KEY_DIR}); "
        "clients use DIR/client.key_secret and DIR/server.key ('none': plain TCP)",
    )
    parser: argparse.ArgumentParser = _Parser(  # and its subparsers, of its class
        prog="mcp-supervisor",
        description="Run every MCP server in its own supervised worker process, and call all their "
        "tools through one registry (names mcp_{server}_{tool}).",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the exit codes' table as it is
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        parents=[common],
        help="run the supervisor in the foreground (Ctrl-C stops it)",
        description="Run the supervisor in the foreground (Ctrl-C stops it). An ipc:// endpoint (the "
        "default) must be in a directory only you can write to (a missing one is created mode 0700). "
        "Any other endpoint, e.g. tcp://127.0.0.1:5555, uses CurveZMQ: it needs the key directory's "
        "server.key_secret and lets in only clients whose public key is in its allowed_clients/ "
        "(make them with 'mcp-supervisor keygen'), unless --insecure.",
    )
    run.add_argument(
        "config",
        nargs="?",
        help="mcpServers JSON file (default: $MCP_SUPERVISOR_CONFIG, ./mcp.json, ./config/mcp.json, "
        "~/.config/mcp-supervisor/mcp.json)",
    )
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    run.add_argument(
        "--insecure",
        action="store_true",
        help="allow a tcp:// endpoint without CURVE: no encryption, and anyone who can reach the port can "
        "call every tool (without it, tcp:// needs DIR/server.key_secret and DIR/allowed_clients/ of --keys)",
    )
    run.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics (/metrics) and the status page (/) over HTTP there, e.g. "
        "127.0.0.1:9464 (port 0: any free port, named in the log); overrides the config's 'metrics'",
    )
    run.add_argument(
        "--tracing",
        action="store_true",
        help="export OpenTelemetry spans of every tool call from the supervisor and its workers, as the "
        "OTEL_* environment variables say (OTLP over HTTP by default); as the config's 'tracing': true",
    )
    run.set_defaults(func=cmd_run)

    keys = sub.add_parser(
        "keygen",
        help="make CURVE keys for tcp:// endpoints (a server and a client key pair)",
        description="Make the CurveZMQ key files a key directory lacks (existing keys are kept): the "
        "supervisor's pair (server.key, server.key_secret), a client's pair (client.key, client.key_secret) "
        "and allowed_clients/ holding the public keys of the clients the supervisor lets in (client.key "
        "to start with). Secret files are mode 0600. Prints where each file goes.",
    )
    keys.add_argument(
        "directory",
        nargs="?",
        metavar="DIR",
        help=f"the key directory (default: ${KEYS_ENV}, else {DEFAULT_KEY_DIR})",
    )
    keys.add_argument(
        "--client-only",
        action="store_true",
        help="only a client key pair, for a client on another machine or account",
    )
    keys.add_argument("--json", action="store_true", help="the directory and each file as JSON")
    keys.set_defaults(func=_command("cmd_keygen"))

    wait = sub.add_parser("wait", parents=[common], help="return when every enabled server is ready")
    wait.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")
    wait.add_argument("--json", action="store_true", help="each server's state as JSON")
    wait.set_defaults(func=_command("cmd_wait"))

    tools = sub.add_parser("tools", parents=[common], help="list every tool in the registry")
    tools.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    tools.set_defaults(func=_command("cmd_tools"))

    call = sub.add_parser("call", parents=[common], help="call a tool and print its text result")
    call.add_argument("name", help="the prefixed tool name, e.g. mcp_time_get_current_time")
    call.add_argument("arguments", nargs="?", default="{}", metavar="ARGS_JSON", help="a JSON object")
    call.add_argument("--timeout", type=float, help="seconds (default: the server's toolTimeout)")
    call.add_argument("--json", action="store_true", help="print the whole result as JSON")
    call.add_argument(
        "--identity",
        metavar="NAME",
        help='call as this client (its own worker on "scope": "client" servers; default: a new one)',
    )
    call.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="print the server's progress notifications on stderr (default: when stderr is a terminal)",
    )
    call.set_defaults(func=_command("cmd_call"))

    status = sub.add_parser("status", parents=[common], help="one row per server")
    status.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    status.set_defaults(func=_command("cmd_status"))

    events = sub.add_parser(
        "events",
        parents=[common],
        help="print registry changes (tools added, removed, changed) and server state changes as they happen",
    )
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.add_argument("--count", type=int, default=0, help="exit after this many events (default: never)")
    events.add_argument(
        "--messages",
        action="store_true",
        help="also the servers' log messages and updates of the resources someone subscribed to",
    )
    events.add_argument(
        "--log-level",
        metavar="LEVEL",
        help="ask every server for log messages from LEVEL up (debug, info, notice, warning, error, "
        "critical, alert, emergency; implies --messages), until this command ends; a server is set to the "
        "most verbose level its connections ask for",
    )
    events.set_defaults(func=_command("cmd_events"))
    listings: tuple[tuple[str, Callable[[argparse.Namespace], int], str], ...] = (
        ("resources", _command("cmd_resources"), "list resources (of every ready server, or of SERVER)"),
        (
            "resource-templates",
            _command("cmd_resource_templates"),
            "list resource templates (URIs to read with 'read')",
        ),
        (
            "prompts",
            _command("cmd_prompts"),
            "list prompts under their prefixed names (mcp_{server}_{prompt})",
        ),
    )
    for name, func, text in listings:
        listing = sub.add_parser(
            name,
            parents=[common],
            help=text,
            description=f"{text[0].upper()}{text[1:]}. Without SERVER, every ready server is asked and each "
            "entry names its server; a server that does not answer in time is left out with a warning.",
        )
        listing.add_argument("server", nargs="?", metavar="SERVER", help="only this server")
        listing.add_argument("--timeout", type=float, help="seconds per server (default: its toolTimeout)")
        listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
        listing.set_defaults(func=func)

    read = sub.add_parser(
        "read",
        parents=[common],
        help="read a resource of a server and print its text",
        description="Read a resource: resources are addressed by their server and their URI (as "
        "'resources' lists them, or a URI that fits one of 'resource-templates'). Text contents are "
        "printed as they are, binary ones as a [blob URI MIME, N bytes] line (--json has the base64).",
    )
    read.add_argument("server", metavar="SERVER", help="the server's name in the config")
    read.add_argument("uri", metavar="URI", help="the resource's URI, e.g. file:///notes/todo.md")
    read.add_argument("--timeout", type=float, help="seconds (default: the server's toolTimeout)")
    read.add_argument("--json", action="store_true", help="print every content item as JSON")
    read.set_defaults(func=_command("cmd_read"))

    prompt = sub.add_parser(
        "prompt",
        parents=[common],
        help="get a prompt with its arguments and print its messages",
        description="Get a prompt by its prefixed name (as 'prompts' lists it), or by the server's own "
        "name with --server. Prints one 'role: text' line per message.",
    )
    prompt.add_argument("name", metavar="NAME", help="e.g. mcp_files_summarize (or summarize --server files)")
    prompt.add_argument(
        "arguments", nargs="?", default="{}", metavar="ARGS_JSON", help="a JSON object of strings"
    )
    prompt.add_argument("--server", help="NAME is this server's own prompt name, not a prefixed one")
    prompt.add_argument("--timeout", type=float, help="seconds (default: the server's toolTimeout)")
    prompt.add_argument("--json", action="store_true", help="print the description and messages as JSON")
    prompt.set_defaults(func=_command("cmd_prompt"))

    for name, text in (
        ("restart", "restart one server's worker (also starts a stopped or failed one); counters reset"),
        ("stop", "stop one server; it stays stopped until 'start' or 'restart'"),
        ("start", "start a stopped or failed server"),
    ):
        operate = sub.add_parser(name, parents=[common], help=text)
        operate.add_argument("server")
        operate.add_argument(
            "--json", action="store_true", help='{"server", "action", "state"}: its state once acted on'
        )
        operate.set_defaults(func=_command("cmd_operate"))

    reload = sub.add_parser(
        "reload",
        parents=[common],
        help="re-read the config file and apply what changed (as SIGHUP does)",
        description="Re-read the config file the supervisor was started with: added servers start, "
        "removed ones stop, changed ones restart with their new config, the others are not touched. "
        "A file with any problem is rejected as a whole (exit code 2) and nothing changes.",
    )
    reload.add_argument("--json", action="store_true", help="print the summary as JSON")
    reload.set_defaults(func=_command("cmd_reload"))
    add_daemon_parsers(sub, common)
    _login_parsers(sub, common)
    _facade_parsers(sub, common)
    return parser


def _login_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    cmd_login, cmd_logout = (
        _later("supervisor.cli.login", "cmd_login"),
        _later("supervisor.cli.login", "cmd_logout"),
    )
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("server", help='a remote server with "oauth" in the config')
    config.add_argument(
        "--config",
        help="the config file that names the server (default: found as 'run' finds it: "
        "$MCP_SUPERVISOR_CONFIG, ./mcp.json, ./config/mcp.json, ~/.config/mcp-supervisor/mcp.json)",
    )
    login = sub.add_parser(
        "login",
        parents=[common, config],
        help="authorize an OAuth server once (browser, or a pasted redirect URL); its tokens are then kept "
        "and refreshed",
        description="Run the OAuth authorization-code flow for one server: print the authorization URL (and "
        "open a browser when there is a display), then take the redirect on the loopback port of the "
        "server's redirectUri, or the redirect URL pasted here (for a machine without a browser, e.g. over "
        "SSH: open the URL anywhere, allow access, and paste the address the browser ends up at, even if "
        "its page fails to load). The tokens are kept in $XDG_STATE_HOME/mcp-supervisor/tokens/ (mode "
        "0600) and refreshed by the server's worker; a running supervisor that holds the server in "
        "needs-login starts it. Servers with the client_credentials or identity_assertion grant need no "
        "login.",
    )
    login.add_argument("--no-browser", action="store_true", help="only print the URL; never open a browser")
    login.add_argument("--no-paste", action="store_true", help="do not read a pasted URL from stdin")
    login.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for the authorization (default 300)"
    )
    login.set_defaults(func=cmd_login)
    logout = sub.add_parser(
        "logout",
        parents=[common, config],
        help="forget an OAuth server's tokens (a running server restarts and needs a login)",
    )
    logout.add_argument("--json", action="store_true", help="what was done, as JSON")
    logout.set_defaults(func=cmd_logout)


def _facade_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
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
        f"'Authorization: Bearer TOKEN' with a token from --token-file or ${TOKEN_ENV}.",
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as exc:
        usage = f"{exc.parser.prog}: error: {exc.message}"
        if "--json" not in argv:
            exc.parser.print_usage(sys.stderr)
        print_failure("--json" in argv, ExitCode.USAGE.name, f"{exc.parser.prog}: {exc.message}", usage)
        return ExitCode.USAGE
    as_json = bool(getattr(args, "json", False))
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except CliError as exc:
        print_failure(as_json, exc.error, str(exc), f"mcp-supervisor: error: {exc}")
        return exc.code
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # stdout's reader went away (`logs -f | head -1`): no traceback, no more output
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.FAILED
    except Exception as exc:
        code = _failed(exc, as_json)
        if code is None:
            raise
        return code


def _failed(exc: Exception, as_json: bool) -> int | None:
    """The exit code of a failure the command did not turn into a ``CliError`` (having said why), or
    None for a bug. The client's modules are loaded here, if the command had not loaded them."""
    import zmq

    from supervisor.client.errors import SupervisorError

    if isinstance(exc, SupervisorError):  # UNREACHABLE and UNAUTHENTICATED too
        print_failure(as_json, exc.code, exc.message, f"mcp-supervisor: {exc}")
        return exit_code_for(exc.code)
    if isinstance(exc, ValueError | zmq.ZMQError):
        print_failure(as_json, ExitCode.USAGE.name, str(exc), f"mcp-supervisor: error: {exc}")
        return ExitCode.USAGE
    return None
