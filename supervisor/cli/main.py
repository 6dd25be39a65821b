"""The ``mcp-supervisor`` command: its top-level parser, ``run``, and how every command's failure
becomes an exit code.

Above: the console script (``mcp-supervisor = supervisor.cli.main:main``) and ``python -m supervisor``.
Below: ``run`` hands over to ``supervisor.daemon.lifecycle``; every other command's arguments are
added by ``supervisor.cli.arguments`` (the commands that talk to a running supervisor, ``keygen``,
``login``, ``logout``) and ``supervisor.cli.facade_commands`` (``mcp``, ``serve``, ``host-config``),
and its function runs from there. This module only parses, dispatches and turns errors into exit
codes: the table of ``supervisor.cli.exit_codes``, which ``--help`` shows. With ``--json`` a failure (a
usage error too) is printed as the command's JSON document (``supervisor.cli.output``); without it,
as one line on stderr.

A command's module is loaded when that command runs, not to parse the arguments: the parser loads
no client stub, no ZeroMQ, no trio and no MCP SDK, so ``mcp`` (which a host starts, and waits for)
loads only what its first answer needs (``supervisor.facade.handshake``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Final, NoReturn

from supervisor import __version__
from supervisor.cli.arguments import add_client_parsers
from supervisor.cli.exit_codes import CliError, ExitCode, exit_code_for, exit_codes_help
from supervisor.cli.facade_commands import add_facade_parsers
from supervisor.cli.output import print_failure
from supervisor.shared.paths import DEFAULT_KEY_DIR, ENDPOINT_ENV, KEYS_ENV, resolve_endpoint

__all__ = ["build_parser", "main"]


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
    federating = (
        f"Several supervisors (--endpoint repeated or a comma list, --federation FILE, or a comma list in "
        f"${ENDPOINT_ENV}) are one registry for {', '.join(sorted(FEDERATING))}: a server several of them "
        "have is the first one's (a warning names the clash); call, read, prompt, restart, stop, start and "
        "logs go to the supervisor whose server it is; tools, resources, resource-templates, prompts, "
        "status, wait, reload and shutdown ask every one and "
        "name each one's rows (HOST). One that does not answer is named on stderr, the others' answers "
        "are still printed, and the exit code is 3. The other commands talk to one supervisor."
    )
    notes = (start, federating, json_note)
    return "\n\n".join(textwrap.fill(note, 100) for note in notes) + f"\n\n{exit_codes_help()}"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--endpoint",
        action="append",
        help=f"the supervisor's ZeroMQ endpoint (default: ${ENDPOINT_ENV}, else {resolve_endpoint(None)}); "
        f"{', '.join(sorted(FEDERATING))} federate several supervisors: repeat it, or give a comma list "
        "(as the variable may)",
    )
    common.add_argument(
        "--federation",
        metavar="FILE",
        help='the supervisors to federate, from a JSON file: {"supervisors": ["tcp://HOST:PORT", '
        '{"endpoint": ..., "name": ..., "keys": DIR}]} (not with --endpoint; see docs/protocol.md)',
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
        help="serve Prometheus metrics (/metrics), the status page (/) and health probes (/healthz, "
        "/readyz) over HTTP there, e.g. 127.0.0.1:9464 (port 0: any free port, named in the log); "
        "overrides the config's 'metrics'",
    )
    run.add_argument(
        "--tracing",
        action="store_true",
        help="export OpenTelemetry spans of every tool call from the supervisor and its workers, as the "
        "OTEL_* environment variables say (OTLP over HTTP by default); as the config's 'tracing': true",
    )
    run.set_defaults(func=cmd_run)
    add_client_parsers(sub, common)
    add_facade_parsers(sub, common)
    return parser


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
        _federate(args)
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


# the commands that federate several supervisors (the others talk to one)
FEDERATING: Final = frozenset(
    {
        "mcp",
        "serve",
        "tools",
        "resources",
        "resource-templates",
        "read",
        "prompts",
        "prompt",
        "call",
        "status",
        "wait",
        "restart",
        "stop",
        "start",
        "logs",
        "reload",
        "shutdown",
    }
)


def _federate(args: argparse.Namespace) -> None:
    """``run`` listens on one endpoint (``args.endpoint``); every other command gets the supervisors it
    talks to as ``args.members`` (``supervisor.shared.federation``), and ``args.endpoint`` is the one
    endpoint of a single member (None when there are several)."""
    if not hasattr(args, "federation"):  # keygen: no endpoint
        return
    from supervisor.shared.federation import FederationError, members, split_endpoints  # loads msgspec

    if args.command == "run":
        given = split_endpoints(args.endpoint or [])
        if args.federation is not None or len(given) > 1:
            raise CliError(
                "run listens on one endpoint: give one --endpoint, no --federation", ExitCode.USAGE
            )
        if not given and "," in os.environ.get(ENDPOINT_ENV, ""):
            why = f"${ENDPOINT_ENV} names several supervisors; run listens on one: give --endpoint"
            raise CliError(why, ExitCode.USAGE)
        args.endpoint = given[0] if given else None
        return
    try:
        args.members = members(args.endpoint, args.federation)
    except FederationError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    args.endpoint = args.members[0].endpoint if len(args.members) == 1 else None
    if args.endpoint is None and args.command not in FEDERATING:
        raise CliError(f"{args.command} talks to one supervisor: give one --endpoint", ExitCode.USAGE)


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
