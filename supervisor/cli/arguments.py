"""The arguments of the commands whose work is loaded when they run: those that talk to a running
supervisor through the client stub, ``keygen``, and ``login`` and ``logout``.

Above: ``supervisor.cli.main``, whose ``build_parser`` calls ``add_client_parsers`` (after ``run``,
before the facade's commands of ``supervisor.cli.facade_commands``). Below: the modules that do each
command's work, named here and loaded only when the command runs (``later``):
``supervisor.cli.registry_commands`` (tools, call, resources, resource-templates, prompts, read,
prompt), ``supervisor.cli.watch_commands`` (wait, status, events, logs),
``supervisor.cli.control_commands`` (restart, stop, start, reload, shutdown),
``supervisor.cli.audit_commands`` (audit), ``supervisor.cli.keygen`` and ``supervisor.cli.login``. So
parsing loads no client stub, no ZeroMQ, no msgspec and no trio.

The commands are added in the order ``--help`` lists them, one function each (or one for a family of
commands with the same arguments).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from supervisor.shared.paths import DEFAULT_KEY_DIR, KEYS_ENV

if TYPE_CHECKING:
    from typing import TypeAlias

    _Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["FOLLOW_INTERVAL", "Command", "add_client_parsers", "later", "several"]

Command = Callable[[argparse.Namespace], int]

FOLLOW_INTERVAL: Final = 0.3  # seconds between two polls of `logs -f`
_REGISTRY: Final = "supervisor.cli.registry_commands"
_WATCH: Final = "supervisor.cli.watch_commands"
_CONTROL: Final = "supervisor.cli.control_commands"


def later(module: str, name: str) -> Command:
    """The command ``name`` of ``module``, which is loaded when the command runs."""

    def run(args: argparse.Namespace) -> int:
        command: Command = getattr(importlib.import_module(module), name)
        return command(args)

    run.__name__ = run.__qualname__ = name
    return run


def several(args: argparse.Namespace) -> bool:
    """Whether the command talks to several supervisors (``args.members``, set by ``main``)."""
    return len(getattr(args, "members", ())) > 1


def add_client_parsers(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """Every command of this module, in ``--help`` order; ``common``: the parent of --endpoint and --keys."""
    for add in (
        _keygen,
        _wait,
        _tools,
        _call,
        _status,
        _events,
        _listings,
        _read,
        _prompt,
        _operate,
        _reload,
        _logs,
        _audit,
        _shutdown,
        _login,
    ):
        add(sub, common)


def _keygen(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``keygen`` makes keys for a supervisor, or a client, that is not running yet: no --endpoint."""
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
    keys.set_defaults(func=later("supervisor.cli.keygen", "cmd_keygen"))


def _wait(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    wait = sub.add_parser("wait", parents=[common], help="return when every enabled server is ready")
    wait.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")
    wait.add_argument("--json", action="store_true", help="each server's state as JSON")
    wait.set_defaults(func=later(_WATCH, "cmd_wait"))


def _tools(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    tools = sub.add_parser(
        "tools", parents=[common], help="list every tool in the registry (of every supervisor given, merged)"
    )
    tools.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    tools.set_defaults(func=later(_REGISTRY, "cmd_tools"))


def _call(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
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
    call.set_defaults(func=later(_REGISTRY, "cmd_call"))


def _status(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    status = sub.add_parser(
        "status", parents=[common], help="one row per server (of every supervisor given: a HOST column)"
    )
    status.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    status.set_defaults(func=later(_WATCH, "cmd_status"))


def _events(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
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
    events.set_defaults(func=later(_WATCH, "cmd_events"))


def _listings(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``resources``, ``resource-templates`` and ``prompts``: the same arguments."""
    listings: tuple[tuple[str, Command, str], ...] = (
        (
            "resources",
            later(_REGISTRY, "cmd_resources"),
            "list resources (of every ready server, or of SERVER)",
        ),
        (
            "resource-templates",
            later(_REGISTRY, "cmd_resource_templates"),
            "list resource templates (URIs to read with 'read')",
        ),
        (
            "prompts",
            later(_REGISTRY, "cmd_prompts"),
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


def _read(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
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
    read.set_defaults(func=later(_REGISTRY, "cmd_read"))


def _prompt(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
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
    prompt.set_defaults(func=later(_REGISTRY, "cmd_prompt"))


def _operate(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``restart``, ``stop`` and ``start``: one server each, one function for the three."""
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
        operate.set_defaults(func=later(_CONTROL, "cmd_operate"))


def _reload(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    reload = sub.add_parser(
        "reload",
        parents=[common],
        help="re-read the config file and apply what changed (as SIGHUP does; every supervisor given)",
        description="Re-read the config file the supervisor was started with: added servers start, "
        "removed ones stop, changed ones restart with their new config, the others are not touched. "
        "A file with any problem is rejected as a whole (exit code 2) and nothing changes.",
    )
    reload.add_argument("--json", action="store_true", help="print the summary as JSON")
    reload.set_defaults(func=later(_CONTROL, "cmd_reload"))


def _logs(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    logs = sub.add_parser(
        "logs",
        parents=[common],
        help="the last lines a server wrote on stderr (and its workers' warnings and errors); -f follows",
        description="Print the last lines of a server's log: what it wrote on stderr and its workers' "
        "warnings and errors, from the supervisor's ring buffer of that server (its last 1000 lines, "
        "256 KiB at most, kept across crashes and restarts; every replica and client session of the "
        "server, each line labelled with its worker). Control characters are shown escaped (\\x1b).",
    )
    logs.add_argument("server", metavar="SERVER", help="the server's name in the config")
    logs.add_argument("-n", "--lines", type=int, default=50, metavar="N", help="the last N (default 50)")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help=f"then print new lines as they come (polled every {FOLLOW_INTERVAL:g} s) until Ctrl-C",
    )
    logs.add_argument("--count", type=int, metavar="N", help="with -f: exit after N new lines")
    logs.add_argument(
        "--json",
        action="store_true",
        help='{"server", "last", "lines": [...]}; with -f one JSON object per line '
        '({"seq", "time", "worker", "stream", "text", "level"})',
    )
    logs.set_defaults(func=later(_WATCH, "cmd_logs"))


def _audit(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    audit = sub.add_parser(
        "audit",
        parents=[common],
        help="the audit trail: who called which tool, read which resource, got which prompt, and how it went",
        description="Print the newest records of the audit trail (one per tool call, resource read and "
        "prompt get, written by the supervisor), newest last: asked of the running supervisor, or read "
        "from the files with --file (PATH, and its rotated PATH.1, PATH.2, ...). Filters combine.",
    )
    audit.add_argument("--since", metavar="AGE|TIME", help="only requests since then: 30s, 10m, 2h, 1d, 1w "
                       "ago, or an ISO time (2025-05-01T12:00:00Z; without a zone: UTC)")  # fmt: skip
    audit.add_argument("--identity", metavar="NAME", help="only this identity's requests")
    audit.add_argument("--tool", metavar="GLOB", help="only tools, prompts or URIs matching this glob")
    audit.add_argument("--server", metavar="NAME", help="only requests routed to this server")
    audit.add_argument("--limit", type=int, default=100, metavar="N", help="the newest N (default 100)")
    audit.add_argument("--file", metavar="PATH", help="read this trail file instead of asking a supervisor")
    audit.add_argument(
        "--json", action="store_true", help="one JSON object per line (the records as written)"
    )
    audit.set_defaults(func=later("supervisor.cli.audit_commands", "cmd_audit"))


def _shutdown(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    shutdown = sub.add_parser(
        "shutdown",
        parents=[common],
        help="stop the supervisor as SIGTERM does: calls in flight finish, every worker and server stops",
        description="Ask the supervisor to stop as SIGTERM does: it refuses new calls, lets the calls in "
        "flight finish (up to its shutdownGrace, or --grace), stops every worker and server, and exits "
        "0. With --wait (the default), return once it no longer answers at its endpoint.",
    )
    shutdown.add_argument(
        "--grace", type=float, metavar="S", help="seconds for the calls in flight (default: shutdownGrace)"
    )
    shutdown.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait until the supervisor is gone (default: wait)",
    )
    shutdown.add_argument(
        "--timeout", type=float, metavar="S", help="seconds to wait for that (default: 60, plus --grace)"
    )
    shutdown.add_argument("--json", action="store_true", help='{"action", "endpoint", "state"}')
    shutdown.set_defaults(func=later(_CONTROL, "cmd_shutdown"))


def _login(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``login`` and ``logout``: the server and the config file that names it."""
    cmd_login, cmd_logout = (
        later("supervisor.cli.login", "cmd_login"),
        later("supervisor.cli.login", "cmd_logout"),
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
