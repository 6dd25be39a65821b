"""The commands that talk to a running supervisor (and ``keygen``), and how they print.

Above: ``supervisor.cli.main``, which parses the arguments and calls one ``cmd_*`` function with them.
Below: the blocking client stub (``supervisor.client.blocking``) and ``supervisor.cli.output``. Each command
prints tables (or with ``--json`` one JSON document) on stdout and raises ``CliError`` with its exit
code (``supervisor.cli.exit_codes``), or lets the client's ``SupervisorError`` go up to ``main``, which
maps its code; a command's progress and warnings go to stderr. ``logs`` and ``shutdown`` are in
``supervisor.cli.daemon_commands``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.cli.output import print_failure, print_json, print_json_line, printable, printable_lines
from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import (
    BadRequestError,
    SupervisorAuthenticationError,
    SupervisorUnreachableError,
)
from supervisor.client.watch import PublicEvent, message_data
from supervisor.protocol import ResourceUpdated, ServerMessage, StateChanged
from supervisor.security.keys import DEFAULT_KEY_DIR, KEYS_ENV, KeyFileError, key_dir, keygen

__all__ = ["EXIT_ERROR", "EXIT_UNREACHABLE", "EXIT_USAGE", "CliError", "ExitCode"]

# The exit codes by their older names (``supervisor.cli.exit_codes`` has them all).
EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = ExitCode.FAILED, ExitCode.USAGE, ExitCode.UNREACHABLE
WAIT_POLL_INTERVAL = 0.2  # seconds between status polls in `wait`


def cmd_keygen(args: argparse.Namespace) -> int:
    """Make the CURVE key files a directory lacks, and say where each goes."""
    directory = key_dir(args.directory)
    try:
        done = keygen(directory, server=not args.client_only)
    except (OSError, KeyFileError) as exc:
        raise CliError(f"cannot make keys in {directory}: {exc}", ExitCode.USAGE) from exc
    if args.json:
        files = [{"what": what, "path": str(path)} for what, path in done]
        print_json({"directory": str(directory), "client_only": args.client_only, "files": files})
        return 0
    for what, path in done:
        print(f"{what:<8} {path}")
    default = key_dir() == directory  # what every command uses without --keys
    flag = "" if default else f" --keys {directory}"
    if args.client_only:
        print(
            f"\nGive {directory / 'client.key'} to the supervisor's operator: it goes in their "
            "allowed_clients directory (any name ending in .key).\n"
            f"Put the supervisor's server.key in {directory}; then commands and agents here use these keys"
            f"{'' if default else f' with --keys {directory} or {KEYS_ENV}={directory}'}."
        )
        return 0
    print(
        f"\nThe supervisor reads server.key_secret and allowed_clients/: "
        f"mcp-supervisor run --endpoint tcp://HOST:PORT{flag}\n"
        f"Clients read client.key_secret and server.key from their key directory (--keys DIR or "
        f"${KEYS_ENV}; default {DEFAULT_KEY_DIR}).\n"
        "To allow another client: run 'mcp-supervisor keygen --client-only DIR' where it runs, copy its "
        f"DIR/client.key to {directory / 'allowed_clients'}/NAME.key (read again at once, no restart), "
        f"and copy {directory / 'server.key'} to DIR/server.key."
    )
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    """Until every enabled server is ready: TIMEOUT when time runs out, UNREACHABLE when no supervisor
    ever answered, FAILED (``UNAVAILABLE``) as soon as one is ``failed`` or ``needs-login``."""
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


def cmd_tools(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        tools = sup.list_tools()
    if args.json:
        fields = ("name", "server", "original_name", "description", "input_schema")
        print_json([{f: getattr(tool, f) for f in fields} for tool in tools])
    else:
        rows = [(t.name, t.server, (t.description.strip().splitlines() or [""])[0][:60]) for t in tools]
        _print_table(("TOOL", "SERVER", "DESCRIPTION"), rows)
    return 0


def cmd_call(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise CliError(f"ARGS_JSON is not valid JSON: {exc}", ExitCode.USAGE) from exc
    if not isinstance(arguments, dict):
        raise CliError(f"ARGS_JSON must be a JSON object, not {type(arguments).__name__}", ExitCode.USAGE)
    show_progress = sys.stderr.isatty() if args.progress is None else args.progress
    try:
        client = SupervisorClient(args.endpoint, keys=args.keys, identity=args.identity)
    except ValueError as exc:
        raise CliError(f"--identity: {exc}", ExitCode.USAGE) from exc
    with client as sup:
        result = sup.call_tool(
            args.name,
            arguments,
            timeout=args.timeout,
            raise_on_error=False,
            progress=_print_progress if show_progress else None,
        )
    if result.is_error:  # a result, not an error reply: the whole of it goes with the failure
        if not args.json:
            print(_terminal(result.text))
        message = f"tool {args.name!r} reported an error"
        human = f"mcp-supervisor: TOOL_ERROR: {message}"
        print_failure(args.json, "TOOL_ERROR", message, human, result=msgspec.to_builtins(result))
        return ExitCode.FAILED
    if args.json:
        print_json(msgspec.to_builtins(result))
    else:
        print(_terminal(result.text))
    return 0


def _terminal(text: str) -> str:
    """A server's text for stdout: made printable on a terminal, as it is into a pipe or a file."""
    return printable_lines(text) if sys.stdout.isatty() else text


def _print_progress(progress: float, total: float | None, message: str | None) -> None:
    """``progress 3/5: message`` on stderr, so stdout stays the result."""
    line = f"progress {progress:g}" + ("" if total is None else f"/{total:g}")
    print(printable(f"{line}: {message}" if message else line), file=sys.stderr, flush=True)


def cmd_status(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        rows = sup.status()
        events = sup.events_endpoint()
        front = sup.front_stats()
    if args.json:
        print_json([msgspec.to_builtins(row) for row in rows])
    else:
        tokens = any(r.token_expires_at is not None for r in rows)  # a TOKEN column for OAuth servers
        pools = any(r.workers for r in rows)  # replicas and sessions: a row each, and their load
        table: list[tuple[str, ...]] = []
        for r in rows:
            busy = sum(w.in_flight for w in r.workers)
            table.append(
                (r.server, r.state, _dash(r.worker_pid), _dash(r.server_pid), str(r.restarts), str(r.tools))
                + (_seconds(r.next_restart_in),)
                + (_token_left(r.token_expires_at),) * tokens
                + (str(busy) if r.workers else "-", "-") * pools
                + ((r.last_error or "-")[:80],)
            )
            for w in r.workers:
                table.append(
                    (f"  {w.name}", w.state, _dash(w.worker_pid), _dash(w.server_pid), str(w.restarts), "-")
                    + (_seconds(w.next_restart_in),)
                    + ("-",) * tokens
                    + (str(w.in_flight), _seconds(w.idle))
                    + ((w.last_error or "-")[:80],)
                )
        _print_table(
            ("SERVER", "STATE", "PID", "SERVER_PID", "RESTARTS", "TOOLS", "RETRY_IN")
            + ("TOKEN",) * tokens
            + ("IN_FLIGHT", "IDLE") * pools
            + ("LAST_ERROR",),
            table,
        )
        print(f"events: {events}")
        print(
            f"front:  {front.in_flight} requests in flight from {front.clients} clients; since the start "
            f"{front.overloaded} refused (OVERLOADED), {front.malformed} malformed, "
            f"{front.dropped_replies} replies dropped with {front.dropped_calls} requests (unread)"
        )
    return 0


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


def cmd_operate(args: argparse.Namespace) -> int:
    """restart / stop / start SERVER; ``--json``: the server's state once the supervisor has acted."""
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        getattr(sup, args.command)(args.server)
        if not args.json:
            print(f"{args.command} {args.server}: done")
            return 0
        state = next((row.state for row in sup.status() if row.server == args.server), None)
    print_json({"server": args.server, "action": args.command, "state": state})
    return 0


def cmd_resources(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        resources = sup.list_resources(args.server, timeout=args.timeout)
    if args.json:
        print_json([msgspec.to_builtins(resource) for resource in resources])
    else:
        rows = [
            (r.server, r.uri, r.name, r.mime_type or "-", _first_line(r.description, 50)) for r in resources
        ]
        _print_table(("SERVER", "URI", "NAME", "MIME", "DESCRIPTION"), rows)
    return 0


def cmd_resource_templates(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        templates = sup.list_resource_templates(args.server, timeout=args.timeout)
    if args.json:
        print_json([msgspec.to_builtins(template) for template in templates])
    else:
        rows = [(t.server, t.uri_template, t.name, _first_line(t.description, 50)) for t in templates]
        _print_table(("SERVER", "URI_TEMPLATE", "NAME", "DESCRIPTION"), rows)
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        result = sup.read_resource(args.server, args.uri, timeout=args.timeout)
    if args.json:
        print_json(msgspec.to_builtins(result))
    else:
        print(_terminal(result.text))
    return 0


def cmd_prompts(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        prompts = sup.list_prompts(args.server, timeout=args.timeout)
    if args.json:
        print_json([msgspec.to_builtins(prompt) for prompt in prompts])
    else:
        rows = [
            (p.name, p.server, _prompt_arguments(p.arguments) or "-", _first_line(p.description, 50))
            for p in prompts
        ]
        _print_table(("PROMPT", "SERVER", "ARGUMENTS", "DESCRIPTION"), rows)
    return 0


def cmd_prompt(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise CliError(f"ARGS_JSON is not valid JSON: {exc}", ExitCode.USAGE) from exc
    if not isinstance(arguments, dict) or not all(isinstance(v, str) for v in arguments.values()):
        raise CliError(
            'ARGS_JSON must be a JSON object of strings, e.g. \'{"city": "Paris"}\'', ExitCode.USAGE
        )
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        result = sup.get_prompt(args.name, arguments, server=args.server, timeout=args.timeout)
    if args.json:
        print_json(msgspec.to_builtins(result))
    else:
        print(_terminal(result.text))
    return 0


def _prompt_arguments(arguments: list[dict[str, Any]]) -> str:
    """``city, [state]``: optional arguments in brackets."""
    names = [str(a.get("name", "")) if a.get("required") else f"[{a.get('name', '')}]" for a in arguments]
    return ", ".join(names)


def _first_line(text: str, width: int) -> str:
    return (text.strip().splitlines() or [""])[0][:width]


def cmd_reload(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        try:
            summary = sup.reload()
        except BadRequestError as exc:  # the file cannot be used; the supervisor runs as it was
            raise CliError(exc.message, ExitCode.USAGE, error=exc.code) from exc
    if args.json:
        print_json(msgspec.to_builtins(summary))
        return 0
    print(f"reloaded {summary.config}")
    for label in ("added", "removed", "changed", "unchanged", "settings"):
        print(f"{label + ':':<11}{', '.join(getattr(summary, label)) or '-'}")
    return 0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns; every cell made printable (a server's last error may carry escape sequences)."""
    header, rows = (
        [printable(str(cell)) for cell in header],
        [[printable(str(c)) for c in row] for row in rows],
    )
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
