"""The commands that watch the supervisor and its servers, changing nothing: ``wait`` (until every
enabled server is ready), ``status`` (a row per server and per worker), ``events`` (registry and
state changes as they happen) and ``logs SERVER [-f]`` (the last lines a server wrote on stderr and
its workers' warnings and errors, from the supervisor's ring buffer; ``-f`` follows new ones).

Above: ``supervisor.cli.main``, which parses the arguments (declared in ``supervisor.cli.arguments``)
and calls one ``cmd_*`` function with them; this module is loaded only then. Below: the blocking
client stub (``supervisor.client.blocking``: ``status``, ``watch``, and ``logs``, a ``GetLogs`` request
answered from ``supervisor.daemon.servers.worker_log``'s ring buffer of that server) and
``supervisor.cli.output``, which prints tables, JSON, and the lines with their control characters
escaped. Failures are raised as ``CliError`` (``supervisor.cli.exit_codes``) or the client's
``SupervisorError``, which ``main`` maps.

``logs -f`` polls: every ``FOLLOW_INTERVAL`` seconds it asks for the lines after the last one it has
seen (``after=``). That is simpler and more robust than a subscription to the events socket: a
request cannot miss lines while a subscription is being joined, every line has a sequence number,
so lines the ring buffer dropped between two polls are counted and said, not lost silently, and a
supervisor that goes away ends the command with its exit code instead of a silent wait. The price,
a request every few tenths of a second while someone watches, is nothing for a CLI.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import msgspec

from supervisor.cli.arguments import FOLLOW_INTERVAL, several
from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.cli.output import print_json, print_json_line, print_table
from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorAuthenticationError, SupervisorUnreachableError
from supervisor.client.watch import PublicEvent, message_data
from supervisor.protocol import (
    LOG_LIMIT,
    AuditStats,
    FrontStats,
    LogLine,
    ResourceUpdated,
    ServerMessage,
    ServerStatus,
    StateChanged,
)
from supervisor.shared.terminal import printable

__all__ = [
    "audit_line",
    "cmd_events",
    "cmd_logs",
    "cmd_status",
    "cmd_wait",
    "format_line",
    "front_line",
    "status_table",
]

WAIT_POLL_INTERVAL: Final = 0.2  # seconds between status polls in `wait`


def cmd_wait(args: argparse.Namespace) -> int:
    """Until every enabled server is ready: TIMEOUT when time runs out, UNREACHABLE when no supervisor
    ever answered, FAILED (``UNAVAILABLE``) as soon as one is ``failed`` or ``needs-login``."""
    if several(args):
        from supervisor.cli.federated_commands import cmd_wait as federated

        return federated(args)
    deadline = time.monotonic() + args.timeout
    waiting: list[str] = ["the supervisor"]
    answered = False
    with SupervisorClient(args.endpoint, request_timeout=1.0, keys=args.keys) as sup:
        while time.monotonic() < deadline:
            try:
                rows = sup.status()
            except SupervisorAuthenticationError:
                raise  # waiting longer will not change the keys
            except SupervisorUnreachableError:
                time.sleep(WAIT_POLL_INTERVAL)
                continue
            answered = True
            failed = [row for row in rows if row.state in ("failed", "needs-login")]
            if failed:
                detail = "; ".join(f"{row.server}: {row.last_error}" for row in failed)
                message = f"server {failed[0].state.replace('-', 's ')}: {detail}"
                raise CliError(message, ExitCode.FAILED, error="UNAVAILABLE")
            waiting = [f"{row.server} ({row.state})" for row in rows if row.state not in ("ready", "stopped")]
            if not waiting:
                ready = sum(row.state == "ready" for row in rows)
                if args.json:
                    print_json(
                        {"ready": ready, "servers": [{"server": r.server, "state": r.state} for r in rows]}
                    )
                else:
                    print(f"all {ready} servers ready")
                return 0
            time.sleep(WAIT_POLL_INTERVAL)
    message = f"timed out after {args.timeout:g} s waiting for: {', '.join(waiting)}"
    if not answered:
        raise CliError(f"{message} (no supervisor answered at {sup.endpoint})", ExitCode.UNREACHABLE)
    raise CliError(message, ExitCode.TIMEOUT)


def cmd_status(args: argparse.Namespace) -> int:
    if several(args):
        from supervisor.cli.federated_commands import cmd_status as federated

        return federated(args)
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        rows = sup.status()
        events = sup.events_endpoint()
        front = sup.front_stats()
    audit, front.audit = front.audit, None
    if args.json:
        figures = {"events": events, "front": msgspec.to_builtins(front), "audit": msgspec.to_builtins(audit)}
        print_json({"servers": [msgspec.to_builtins(row) for row in rows], **figures})
    else:
        print_table(*status_table(rows))
        for r in rows:
            if r.sandbox is not None:
                print(f"{r.server}: {r.sandbox}")
        print(f"events: {events}")
        print(f"front:  {front_line(front)}")
        print(f"audit:  {audit_line(audit)}")
    return 0


def status_table(
    rows: Sequence[ServerStatus], hosts: Sequence[str] | None = None
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The header and rows of ``status``'s table; with ``hosts`` (each row's), a HOST column first."""
    tokens = any(r.token_expires_at is not None for r in rows)  # a TOKEN column for OAuth servers
    pools = any(r.workers for r in rows)  # replicas and sessions: a row each, and their load
    host: tuple[str, ...] = ()
    table: list[tuple[str, ...]] = []
    for index, r in enumerate(rows):
        busy = sum(w.in_flight for w in r.workers)
        host = () if hosts is None else (hosts[index],)
        table.append(
            host
            + (r.server, r.state, _dash(r.worker_pid), _dash(r.server_pid), str(r.restarts), str(r.tools))
            + (_seconds(r.next_restart_in),)
            + (_token_left(r.token_expires_at),) * tokens
            + (str(busy) if r.workers else "-", "-") * pools
            + ((r.last_error or "-")[:80],)
        )
        for w in r.workers:
            table.append(
                ("",) * len(host)
                + (f"  {w.name}", w.state, _dash(w.worker_pid), _dash(w.server_pid), str(w.restarts), "-")
                + (_seconds(w.next_restart_in),)
                + ("-",) * tokens
                + (str(w.in_flight), _seconds(w.idle))
                + ((w.last_error or "-")[:80],)
            )
    header = (
        ("HOST",) * (hosts is not None)
        + ("SERVER", "STATE", "PID", "SERVER_PID", "RESTARTS", "TOOLS", "RETRY_IN")
        + ("TOKEN",) * tokens
        + ("IN_FLIGHT", "IDLE") * pools
        + ("LAST_ERROR",)
    )
    return header, table


def front_line(front: FrontStats) -> str:
    """The front door's figures in words, for ``status``."""
    return (
        f"{front.in_flight} requests in flight from {front.clients} clients; since the start "
        f"{front.overloaded} refused (OVERLOADED), {front.malformed} malformed, "
        f"{front.dropped_replies} replies dropped with {front.dropped_calls} requests (unread)"
    )


def audit_line(audit: AuditStats | None) -> str:
    """The audit trail's figures in words, for ``status``."""
    if audit is None:
        return "- (the supervisor keeps no audit trail)"
    if not audit.path:
        return "off"
    return (
        f"{audit.path}: {audit.lines} lines written, {audit.failures} writes failed, "
        f"{audit.dropped} lines dropped, {audit.waiting} waiting"
    )


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _token_left(expires_at: float | None) -> str:
    """How long an OAuth access token has left: ``52m``, ``expired``, or ``-``."""
    if expires_at is None:
        return "-"
    left = expires_at - time.time()
    if left <= 0:
        return "expired"
    return f"{left:.0f}s" if left < 120 else f"{left / 60:.0f}m" if left < 7200 else f"{left / 3600:.0f}h"


def cmd_events(args: argparse.Namespace) -> int:
    """Print registry and state events as they come, until interrupted (or ``--count`` of them);
    with ``--messages`` (or ``--log-level``), the servers' log messages and resource updates too."""
    seen = 0
    messages = args.messages or args.log_level is not None
    with SupervisorClient(args.endpoint, keys=args.keys) as sup, sup.watch(messages=messages) as events:
        if args.log_level is not None:
            sup.set_log_level(args.log_level)
        if not args.json:
            print(f"watching {events.endpoint} (Ctrl-C to stop)", file=sys.stderr)
        try:
            for event in events:
                if args.json:
                    print_json_line(_builtins(event))  # "type" names the event
                else:
                    print(printable(_describe(event)), flush=True)
                seen += 1
                if args.count and seen >= args.count:
                    break
        finally:
            if args.log_level is not None:  # the servers go back to what others ask for
                sup.set_log_level("")
    return 0


def _builtins(event: PublicEvent) -> Any:
    if isinstance(event, ServerMessage):  # its data is msgpack, relayed as the server sent it
        fields = {"server": event.server, "level": event.level, "logger": event.logger}
        return {"type": "ServerMessage", **fields, "data": message_data(event)}
    return msgspec.to_builtins(event)


def _describe(event: PublicEvent) -> str:
    if isinstance(event, ServerMessage):
        logger = f" {event.logger}" if event.logger else ""
        data = message_data(event)
        text = data if isinstance(data, str) else msgspec.json.encode(data).decode()
        return f"log      {event.server}{logger}: {event.level}: {text}"
    if isinstance(event, ResourceUpdated):
        return f"resource {event.server}: {event.uri} updated"
    if isinstance(event, StateChanged):
        error = (
            f" ({event.last_error})"
            if event.last_error and event.state in ("failed", "restarting", "needs-login")
            else ""
        )
        return f"state    {event.server}: {event.previous} -> {event.state}{error}"
    parts = [f"+{info.name}" for info in event.added] + [f"-{name}" for name in event.removed]
    parts += [f"~{info.name}" for info in event.changed]
    return f"registry {event.server}: {' '.join(parts)} (version {event.version})"


def format_line(line: LogLine) -> str:
    """``2025-01-02 10:11:12.345 files#2: text`` (a worker's line: ``files#2 [worker ERROR]: text``),
    with every control character but the tab escaped."""
    when = datetime.fromtimestamp(line.time).isoformat(sep=" ", timespec="milliseconds")
    who = line.worker if line.stream == "server" else f"{line.worker} [worker {line.level or 'log'}]"
    return printable(f"{when} {who}: {line.text}")


def cmd_logs(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise CliError(f"-n must be 0 or more lines, not {args.lines}", ExitCode.USAGE)
    if args.count is not None and (not args.follow or args.count < 1):
        raise CliError("--count N (N >= 1) is for -f: stop after N new lines", ExitCode.USAGE)
    if several(args):  # the server's owner's log
        from supervisor.client.federated import FederatedClient

        with FederatedClient(args.members, keys=args.keys) as fed:
            return _print_logs(fed.client(fed.server_owner(args.server)), args)
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        return _print_logs(sup, args)


def _print_logs(sup: SupervisorClient, args: argparse.Namespace) -> int:
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
    if as_json:
        print_json_line(msgspec.to_builtins(line))
    else:
        print(format_line(line), flush=True)
