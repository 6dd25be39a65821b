"""The commands about the running supervisor itself, with their arguments: ``logs SERVER [-f]``,
the last lines a server wrote on stderr and its workers' warnings and errors, from the supervisor's
ring buffer (``-f`` follows new ones); and ``shutdown``, which stops it as SIGTERM does.

Above: ``supervisor.cli.main``, which adds these parsers (``add_daemon_parsers``) and runs the command.
Below: the blocking client stub's ``logs`` (a ``GetLogs`` request, answered from
``supervisor.daemon.servers.worker_log``'s ring buffer of that server) and ``shutdown`` (a ``Shutdown``
request), and ``supervisor.cli.output``, which prints the lines with their control characters escaped.

``-f`` polls: every ``FOLLOW_INTERVAL`` seconds it asks for the lines after the last one it has
seen (``after=``). That is simpler and more robust than a subscription to the events socket: a
request cannot miss lines while a subscription is being joined, every line has a sequence number,
so lines the ring buffer dropped between two polls are counted and said, not lost silently, and a
supervisor that goes away ends the command with its exit code instead of a silent wait. The price,
a request every few tenths of a second while someone watches, is nothing for a CLI.

``shutdown`` returns once the supervisor has agreed; with ``--wait`` (the default) it then pings
until nothing answers at the endpoint (and an ipc endpoint's socket file is gone, so that a ping a
busy supervisor answers late is not taken for its end): the supervisor closes its front socket
last, after every worker and server is reaped, so a script that goes on knows they are gone.

The client stub and the protocol are loaded when a command runs: the CLI adds these parsers for every
command, ``mcp`` too, which loads as little as it can before its first answer.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Final

from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.cli.output import print_json, print_json_line, printable
from supervisor.shared.paths import ipc_path

if TYPE_CHECKING:
    from supervisor.client.blocking import SupervisorClient
    from supervisor.protocol import LogLine

__all__ = ["FOLLOW_INTERVAL", "add_daemon_parsers", "cmd_logs", "cmd_shutdown", "format_line"]

FOLLOW_INTERVAL: Final = 0.3  # seconds between two polls of `logs -f`
GONE_POLL_TIMEOUT: Final = 0.5  # seconds a ping of `shutdown` waits before the supervisor counts as gone
GONE_POLL_INTERVAL: Final = 0.2  # seconds between those pings
SHUTDOWN_WAIT: Final = 60.0  # seconds `shutdown` waits for the supervisor to go (beyond --grace)


def format_line(line: LogLine) -> str:
    """``2025-01-02 10:11:12.345 files#2: text`` (a worker's line: ``files#2 [worker ERROR]: text``),
    with every control character but the tab escaped."""
    when = datetime.fromtimestamp(line.time).isoformat(sep=" ", timespec="milliseconds")
    who = line.worker if line.stream == "server" else f"{line.worker} [worker {line.level or 'log'}]"
    return printable(f"{when} {who}: {line.text}")


def cmd_logs(args: argparse.Namespace) -> int:
    import msgspec

    from supervisor.client.blocking import SupervisorClient
    from supervisor.protocol import LOG_LIMIT

    if args.lines < 0:
        raise CliError(f"-n must be 0 or more lines, not {args.lines}", ExitCode.USAGE)
    if args.count is not None and (not args.follow or args.count < 1):
        raise CliError("--count N (N >= 1) is for -f: stop after N new lines", ExitCode.USAGE)
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        log = sup.logs(args.server, limit=min(args.lines, LOG_LIMIT))
        if not args.follow:
            if args.json:
                print_json(msgspec.to_builtins(log))
            else:
                for line in log.lines:
                    print(format_line(line))
            return 0
        for line in log.lines:
            _show(line, args.json)
        _follow(sup, args, log.last)
    return 0


def _follow(sup: SupervisorClient, args: argparse.Namespace, after: int) -> None:
    """Print new lines as they come (until Ctrl-C, or ``--count`` of them)."""
    from supervisor.protocol import LOG_LIMIT

    left = args.count
    while left is None or left > 0:
        time.sleep(FOLLOW_INTERVAL)
        log = sup.logs(args.server, after=after, limit=LOG_LIMIT)
        if log.last < after:  # a new ring buffer: the supervisor was restarted at this endpoint
            after = 0
            continue
        if log.lines and log.lines[0].seq > after + 1:
            missed = log.lines[0].seq - after - 1
            print(f"mcp-supervisor: {missed} lines not shown (the ring buffer moved on)", file=sys.stderr)
        shown = log.lines[:left]
        for line in shown:
            _show(line, args.json)
            after = line.seq
        if left is not None:
            left -= len(shown)


def _show(line: LogLine, as_json: bool) -> None:
    import msgspec

    if as_json:
        print_json_line(msgspec.to_builtins(line))
    else:
        print(format_line(line), flush=True)


def cmd_shutdown(args: argparse.Namespace) -> int:
    """Ask the supervisor to stop as SIGTERM does; with ``--wait``, return once it no longer answers."""
    from supervisor.client.blocking import SupervisorClient
    from supervisor.protocol import MAX_GRACE

    if args.grace is not None and not 0 <= args.grace <= MAX_GRACE:  # NaN too
        raise CliError(f"--grace must be 0 to {MAX_GRACE:g} seconds, not {args.grace:g}", ExitCode.USAGE)
    wait = args.timeout if args.timeout is not None else SHUTDOWN_WAIT + (args.grace or 0.0)
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        sup.shutdown(grace=args.grace)
    if args.wait:
        _wait_gone(args, wait)
    state = "stopped" if args.wait else "stopping"
    if args.json:
        print_json({"action": "shutdown", "endpoint": sup.endpoint, "state": state})
    else:
        print(f"shutdown: the supervisor at {sup.endpoint} {'has stopped' if args.wait else 'is stopping'}")
    return 0


def _wait_gone(args: argparse.Namespace, timeout: float) -> None:
    """Return once no supervisor answers at the endpoint; TIMEOUT after ``timeout`` seconds."""
    from supervisor.client.blocking import SupervisorClient
    from supervisor.client.errors import SupervisorUnreachableError

    deadline = time.monotonic() + timeout
    with SupervisorClient(args.endpoint, request_timeout=GONE_POLL_TIMEOUT, keys=args.keys) as sup:
        socket_file = ipc_path(sup.endpoint)
        while time.monotonic() < deadline:
            try:
                sup.ping()
            except SupervisorUnreachableError:
                if socket_file is None or not socket_file.exists():
                    return
            time.sleep(GONE_POLL_INTERVAL)
    message = f"the supervisor still answers after {timeout:g} s (draining or stopping)"
    raise CliError(message, ExitCode.TIMEOUT)


def add_daemon_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The ``logs`` and ``shutdown`` subcommands; ``common``: the parent of --endpoint and --keys."""
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
    logs.set_defaults(func=cmd_logs)

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
    shutdown.set_defaults(func=cmd_shutdown)
