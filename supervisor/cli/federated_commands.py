"""The commands given several supervisors: ``tools``, ``status``, ``wait``, ``restart``/``stop``/``start``,
``reload`` and ``shutdown`` over a federation (``call`` and ``logs`` go through their own modules,
to the member that owns the tool or server).

Above: the ``cmd_*`` functions of ``supervisor.cli.registry_commands``, ``supervisor.cli.watch_commands``
and ``supervisor.cli.control_commands``, which hand over here when ``args.members`` holds several
supervisors (``supervisor.cli.main`` lets only the commands of its ``FEDERATING`` do that). Below: the
federated client (``supervisor.client.federated``) and ``supervisor.cli.output``.

What the members answer is printed together, each row or result with its member (``HOST``, the
member's name; ``"host"`` in JSON). A member that does not answer is named on stderr with its endpoint
and why, and the others' answers are still printed; the exit code is then that of its failure (3,
UNREACHABLE, for one that did not answer). A server several members have is one member's, the first
named (``supervisor.shared.federation``): the clash is a warning on stderr, not a failure. With
``--json`` the listings are one object (``tools``: ``{"tools", "clashes", "unreachable"}``;
``status``: ``{"servers", "clashes", "unreachable"}``) and ``reload`` and ``shutdown`` an array of
one object per member.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from supervisor.cli.control_commands import SHUTDOWN_WAIT, STILL_ANSWERS, gone
from supervisor.cli.exit_codes import CliError, ExitCode, exit_code_for
from supervisor.cli.output import print_json, print_table
from supervisor.cli.watch_commands import WAIT_POLL_INTERVAL, front_line, status_table
from supervisor.client.errors import SupervisorAuthenticationError
from supervisor.client.federated import Clash, Failure, FederatedClient
from supervisor.shared.federation import Member, merge
from supervisor.shared.terminal import printable

__all__ = [
    "clash_json",
    "cmd_operate",
    "cmd_reload",
    "cmd_shutdown",
    "cmd_status",
    "cmd_tools",
    "cmd_wait",
    "failure_json",
    "federation",
    "report",
]

WAIT_REQUEST_TIMEOUT: Final = 1.0  # seconds `wait` gives each member's status


def federation(args: argparse.Namespace, **options: Any) -> FederatedClient:
    """The client of ``args.members``, each with its own keys or ``--keys``."""
    return FederatedClient(args.members, keys=args.keys, **options)


def _warn(message: str) -> None:
    print(printable(f"mcp-supervisor: {message}"), file=sys.stderr, flush=True)


def report(failures: Sequence[Failure], clashes: Sequence[Clash] = ()) -> int:
    """Each clash and failure on stderr; the exit code of the first failure (0 without)."""
    for clash in clashes:
        _warn(f"warning: {clash}")
    for failure in failures:
        _warn(str(failure))
    if any(failure.unreachable for failure in failures):
        return ExitCode.UNREACHABLE
    return exit_code_for(failures[0].error.code) if failures else ExitCode.OK


def _member(member: Member) -> dict[str, str]:
    return {"host": member.name, "endpoint": member.endpoint}


def failure_json(failure: Failure) -> dict[str, Any]:
    return {
        **_member(failure.member),
        "error": {"code": failure.error.code, "message": failure.error.message},
    }


def clash_json(clash: Clash) -> dict[str, str]:
    return {"server": clash.server, "host": clash.owner.name, "left_out": clash.left_out.name}


def cmd_tools(args: argparse.Namespace) -> int:
    with federation(args) as fed:
        listing = fed.list_tools()
    hosts = [listing.owners[tool.server].name for tool in listing.entries]
    if args.json:
        fields = ("name", "server", "original_name", "description", "input_schema")
        pairs = zip(listing.entries, hosts, strict=True)
        tools = [{f: getattr(t, f) for f in fields} | {"host": host} for t, host in pairs]
        clashes, unreachable = (
            [clash_json(c) for c in listing.clashes],
            [failure_json(f) for f in listing.failures],
        )
        print_json({"tools": tools, "clashes": clashes, "unreachable": unreachable})
    else:
        rows = [
            (t.name, t.server, host, (t.description.strip().splitlines() or [""])[0][:60])
            for t, host in zip(listing.entries, hosts, strict=True)
        ]
        print_table(("TOOL", "SERVER", "HOST", "DESCRIPTION"), rows)
    return report(listing.failures, listing.clashes)


def cmd_status(args: argparse.Namespace) -> int:
    with federation(args) as fed:
        outcomes = fed.each(lambda sup: (sup.status(), sup.events_endpoint(), sup.front_stats()))
    answered = [(o.member, *o.value) for o in outcomes if o.value is not None]
    failures = [o.failure for o in outcomes if o.failure is not None]
    merged = merge([o.value[0] if o.value is not None else None for o in outcomes])
    members = [o.member for o in outcomes]
    clashes = [Clash(server, members[owner], members[left]) for server, owner, left in merged.clashes]
    rows = [(member, row) for member, status, _, _ in answered for row in status]
    if args.json:
        servers = [{"host": member.name} | msgspec.to_builtins(row) for member, row in rows]
        document = {"servers": servers, "clashes": [clash_json(c) for c in clashes]}
        print_json(document | {"unreachable": [failure_json(f) for f in failures]})
    else:
        print_table(*status_table([row for _, row in rows], [member.name for member, _ in rows]))
        for member, row in rows:
            if row.sandbox is not None:
                print(f"{member.name} {row.server}: {row.sandbox}")
        for member, _, events, front in answered:
            print(f"{member.name}: events: {events}")
            print(f"{member.name}: front:  {front_line(front)}")
    return report(failures, clashes)


def cmd_wait(args: argparse.Namespace) -> int:
    """Until every member answers and every enabled server of each is ready (as ``wait`` for one)."""
    deadline = time.monotonic() + args.timeout
    waiting: list[str] = [f"the supervisor at {m.endpoint}" for m in args.members]
    silent: list[str] = list(waiting)
    with federation(args, request_timeout=WAIT_REQUEST_TIMEOUT) as fed:
        while time.monotonic() < deadline:
            status = fed.status()
            for failure in status.failures:
                if isinstance(failure.error, SupervisorAuthenticationError):
                    raise failure.error  # waiting longer will not change the keys
            silent = [f"{f.member.name} ({f.member.endpoint})" for f in status.failures]
            failed = [r for r in status.rows if r.status.state in ("failed", "needs-login")]
            if failed:
                detail = "; ".join(
                    f"{r.status.server} on {r.member.name}: {r.status.last_error}" for r in failed
                )
                message = f"server {failed[0].status.state.replace('-', 's ')}: {detail}"
                raise CliError(message, ExitCode.FAILED, error="UNAVAILABLE")
            waiting = [f"the supervisor {name}" for name in silent] + [
                f"{r.status.server} on {r.member.name} ({r.status.state})"
                for r in status.rows
                if r.status.state not in ("ready", "stopped")
            ]
            if not waiting:
                ready = sum(r.status.state == "ready" for r in status.rows)
                if args.json:
                    servers = [
                        {"host": r.member.name, "server": r.status.server, "state": r.status.state}
                        for r in status.rows
                    ]
                    print_json({"ready": ready, "servers": servers})
                else:
                    print(f"all {ready} servers ready on {len(args.members)} supervisors")
                return 0
            time.sleep(WAIT_POLL_INTERVAL)
    message = f"timed out after {args.timeout:g} s waiting for: {', '.join(waiting)}"
    if silent:
        raise CliError(f"{message} (no supervisor answered at {', '.join(silent)})", ExitCode.UNREACHABLE)
    raise CliError(message, ExitCode.TIMEOUT)


def cmd_operate(args: argparse.Namespace) -> int:
    """restart / stop / start SERVER on the member that owns it."""
    with federation(args) as fed:
        member = getattr(fed, args.command)(args.server)
        if not args.json:
            print(f"{args.command} {args.server} on {member.name}: done")
            return 0
        rows = fed.client(member).status()
    state = next((row.state for row in rows if row.server == args.server), None)
    print_json({"server": args.server, "action": args.command, "state": state, "host": member.name})
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    """Every member re-reads its config file; each one's summary, or why it did not."""
    with federation(args) as fed:
        outcomes = fed.reload()
    failures = [o.failure for o in outcomes if o.failure is not None]
    if args.json:
        print_json(
            [_member(o.member) | msgspec.to_builtins(o.value) for o in outcomes if o.value is not None]
            + [failure_json(failure) for failure in failures]
        )
    else:
        for outcome in outcomes:
            if outcome.value is None:
                continue
            print(f"{outcome.member.name}: reloaded {outcome.value.config}")
            for label in ("added", "removed", "changed", "unchanged", "settings"):
                print(f"  {label + ':':<11}{', '.join(getattr(outcome.value, label)) or '-'}")
    return report(failures)


def cmd_shutdown(args: argparse.Namespace) -> int:
    """Ask every member to stop; with ``--wait``, return once each that agreed no longer answers."""
    wait = args.timeout if args.timeout is not None else SHUTDOWN_WAIT + (args.grace or 0.0)
    with federation(args) as fed:
        outcomes = fed.shutdown(grace=args.grace)
    deadline = time.monotonic() + wait
    agreed = [o.member for o in outcomes if o.failure is None]
    failures = [o.failure for o in outcomes if o.failure is not None]
    lingering = [m for m in agreed if args.wait and not gone(m.endpoint, m.keys or args.keys, deadline)]
    results: list[dict[str, Any]] = []
    for outcome in outcomes:
        member = outcome.member
        if outcome.failure is not None:
            results.append({"action": "shutdown"} | failure_json(outcome.failure))
            continue
        state = "stopping" if not args.wait or member in lingering else "stopped"
        results.append({"action": "shutdown", **_member(member), "state": state})
        if not args.json:
            done = "has stopped" if state == "stopped" else "is stopping"
            print(f"shutdown: the supervisor {member.name} at {member.endpoint} {done}")
    if args.json:
        print_json(results)
    code = report(failures)
    for member in lingering:
        _warn(f"{member.name} ({member.endpoint}): {STILL_ANSWERS.format(wait)}")
    return code or (ExitCode.TIMEOUT if lingering else ExitCode.OK)
