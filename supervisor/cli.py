"""The ``mcp-supervisor`` command: run the supervisor, and talk to a running one.

Exit codes: 0 success; 1 the supervisor answered with an error (or a wait
failed); 2 bad usage, bad config or bad arguments; 3 no supervisor answered.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio
import zmq

from supervisor import __version__
from supervisor.client import SupervisorClient
from supervisor.config import ConfigError, load_config
from supervisor.curve import AllowedClients
from supervisor.errors import (
    BadRequestError,
    SupervisorAuthenticationError,
    SupervisorError,
    SupervisorUnreachableError,
)
from supervisor.keys import DEFAULT_KEY_DIR, KEYS_ENV, KeyFileError, ServerKeys, key_dir, keygen, needs_curve
from supervisor.paths import (
    ENDPOINT_ENV,
    claim_ipc_dir,
    default_endpoint,
    ensure_runtime_dir,
    ipc_path,
    resolve_endpoint,
    runtime_dir,
)
from supervisor.protocol import RegistryChanged, StateChanged

if TYPE_CHECKING:
    from supervisor.core import Supervisor

__all__ = ["main"]

log = logging.getLogger("mcp_supervisor")

EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
WAIT_POLL_INTERVAL = 0.2  # seconds between status polls in `wait`


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc
    for problem in config.problems:
        log.error("config %s: %s (skipped)", config.path, problem.message)
    endpoint = resolve_endpoint(args.endpoint)
    curve = _front_door(endpoint, args.keys, args.insecure)
    _claim_endpoint(endpoint)
    workers = ensure_runtime_dir(runtime_dir()) / f"workers-{os.getpid()}.sock"
    from supervisor.core import Supervisor

    supervisor = Supervisor(config, endpoint=endpoint, worker_endpoint=f"ipc://{workers}", curve=curve)
    try:
        supervisor.bind()
    except zmq.ZMQError as exc:
        raise CliError(f"cannot listen on {endpoint}: {exc}") from exc
    trio.run(_serve, supervisor)
    return 0


def _front_door(endpoint: str, keys: str | None, insecure: bool) -> ServerKeys | None:
    """The CURVE keys for a network endpoint (None for ipc, or with ``--insecure``, said loudly)."""
    if not needs_curve(endpoint):
        return None
    if insecure:
        log.warning(
            "INSECURE: %s is plain TCP (--insecure): nothing is encrypted and anyone who can reach it "
            "can call every tool and read every result; use CURVE keys ('mcp-supervisor keygen') instead",
            endpoint,
        )
        return None
    try:
        curve = ServerKeys.load(key_dir(keys))
    except KeyFileError as exc:
        raise CliError(
            f"{endpoint} is not an ipc:// endpoint, so it needs CURVE keys: {exc} (or pass --insecure "
            "for plain TCP: no encryption, and anyone who can reach the port can call every tool)",
            EXIT_USAGE,
        ) from exc
    allowed = len(AllowedClients(curve.allowed).public_keys())
    log.info(
        "CURVE on %s: server key %s, %d allowed client keys in %s",
        endpoint,
        curve.public_file,
        allowed,
        curve.allowed,
    )
    if not allowed:
        log.warning("no client can connect yet: put their public keys (*.key) in %s", curve.allowed)
    return curve


def _claim_endpoint(endpoint: str) -> None:
    """Refuse to start over a live supervisor; clear a stale ipc socket file."""
    path = ipc_path(endpoint)
    if path is None:
        return
    try:
        if path.parent == runtime_dir():
            ensure_runtime_dir(path.parent)
        else:
            claim_ipc_dir(path.parent)
    except OSError as exc:
        hint = f"use a private directory (the default endpoint is {default_endpoint()})"
        raise CliError(f"cannot listen on {endpoint}: {exc}; {hint}", EXIT_USAGE) from exc
    if not path.exists():
        return
    try:
        with SupervisorClient(endpoint, request_timeout=1.0) as probe:
            probe.ping()
    except SupervisorError:
        path.unlink(missing_ok=True)  # left behind by a supervisor that was killed
        return
    raise CliError(f"a supervisor is already running at {endpoint}")


async def _serve(supervisor: Supervisor) -> None:
    """Serve until SIGINT/SIGTERM; then drain in-flight calls (a second signal cuts that short) and stop.
    SIGHUP reloads the config file."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("SIGHUP received; reloading the config")
                    supervisor.reload_nowait()
                    continue
                grace = supervisor.config.settings.shutdown_grace  # as the last reload left it
                log.info(
                    "%s received; finishing calls in flight (up to %g s)", signal.Signals(signum).name, grace
                )
                break
            async with trio.open_nursery() as draining:
                draining.start_soon(_cut_short, signals, draining.cancel_scope)
                await supervisor.drain(grace)
                draining.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    log.info("stopped")


async def _cut_short(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for signum in signals:
        if signum == signal.SIGHUP:
            continue
        log.warning("%s received again; stopping now", signal.Signals(signum).name)
        scope.cancel()
        return


def cmd_keygen(args: argparse.Namespace) -> int:
    """Make the CURVE key files a directory lacks, and say where each goes."""
    directory = key_dir(args.directory)
    try:
        done = keygen(directory, server=not args.client_only)
    except (OSError, KeyFileError) as exc:
        raise CliError(f"cannot make keys in {directory}: {exc}", EXIT_USAGE) from exc
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


# ------------------------------------------------------------- commands


def cmd_wait(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    waiting: list[str] = ["the supervisor"]
    with SupervisorClient(args.endpoint, request_timeout=1.0, keys=args.keys) as sup:
        while time.monotonic() < deadline:
            try:
                rows = sup.status()
            except SupervisorAuthenticationError:
                raise  # waiting longer will not change the keys
            except SupervisorUnreachableError:
                time.sleep(WAIT_POLL_INTERVAL)
                continue
            failed = [row for row in rows if row.state == "failed"]
            if failed:
                detail = "; ".join(f"{row.server}: {row.last_error}" for row in failed)
                raise CliError(f"server failed: {detail}")
            waiting = [f"{row.server} ({row.state})" for row in rows if row.state not in ("ready", "stopped")]
            if not waiting:
                print(f"all {sum(row.state == 'ready' for row in rows)} servers ready")
                return 0
            time.sleep(WAIT_POLL_INTERVAL)
    raise CliError(f"timed out after {args.timeout:g} s waiting for: {', '.join(waiting)}")


def cmd_tools(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        tools = sup.list_tools()
    if args.json:
        fields = ("name", "server", "original_name", "description", "input_schema")
        _print_json([{f: getattr(tool, f) for f in fields} for tool in tools])
    else:
        rows = [(t.name, t.server, (t.description.strip().splitlines() or [""])[0][:60]) for t in tools]
        _print_table(("TOOL", "SERVER", "DESCRIPTION"), rows)
    return 0


def cmd_call(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise CliError(f"ARGS_JSON is not valid JSON: {exc}", EXIT_USAGE) from exc
    if not isinstance(arguments, dict):
        raise CliError(f"ARGS_JSON must be a JSON object, not {type(arguments).__name__}", EXIT_USAGE)
    show_progress = sys.stderr.isatty() if args.progress is None else args.progress
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        result = sup.call_tool(
            args.name,
            arguments,
            timeout=args.timeout,
            raise_on_error=False,
            progress=_print_progress if show_progress else None,
        )
    if args.json:
        _print_json(msgspec.to_builtins(result))
    else:
        print(result.text)
    if result.is_error:
        print(f"mcp-supervisor: TOOL_ERROR: tool {args.name!r} reported an error", file=sys.stderr)
        return EXIT_ERROR
    return 0


def _print_progress(progress: float, total: float | None, message: str | None) -> None:
    """``progress 3/5: message`` on stderr, so stdout stays the result."""
    line = f"progress {progress:g}" + ("" if total is None else f"/{total:g}")
    print(f"{line}: {message}" if message else line, file=sys.stderr, flush=True)


def cmd_status(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        rows = sup.status()
        events = sup.events_endpoint()
        front = sup.front_stats()
    if args.json:
        _print_json([msgspec.to_builtins(row) for row in rows])
    else:
        _print_table(
            ("SERVER", "STATE", "PID", "SERVER_PID", "RESTARTS", "TOOLS", "RETRY_IN", "LAST_ERROR"),
            [
                (
                    r.server,
                    r.state,
                    _dash(r.worker_pid),
                    _dash(r.server_pid),
                    str(r.restarts),
                    str(r.tools),
                    "-" if r.next_restart_in is None else f"{r.next_restart_in:.1f}s",
                    (r.last_error or "-")[:80],
                )
                for r in rows
            ],
        )
        print(f"events: {events}")
        print(
            f"front:  {front.in_flight} requests in flight from {front.clients} clients; since the start "
            f"{front.overloaded} refused (OVERLOADED), {front.malformed} malformed, "
            f"{front.dropped_replies} replies dropped with {front.dropped_calls} requests (unread)"
        )
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    """Print registry and state events as they come, until interrupted (or ``--count`` of them)."""
    seen = 0
    with SupervisorClient(args.endpoint, keys=args.keys) as sup, sup.watch() as events:
        if not args.json:
            print(f"watching {events.endpoint} (Ctrl-C to stop)", file=sys.stderr)
        for event in events:
            if args.json:
                print(json.dumps(msgspec.to_builtins(event)), flush=True)  # "type" names the event
            else:
                print(_describe(event), flush=True)
            seen += 1
            if args.count and seen >= args.count:
                break
    return 0


def _describe(event: RegistryChanged | StateChanged) -> str:
    if isinstance(event, StateChanged):
        error = (
            f" ({event.last_error})" if event.last_error and event.state in ("failed", "restarting") else ""
        )
        return f"state    {event.server}: {event.previous} -> {event.state}{error}"
    parts = [f"+{info.name}" for info in event.added] + [f"-{name}" for name in event.removed]
    parts += [f"~{info.name}" for info in event.changed]
    return f"registry {event.server}: {' '.join(parts)} (version {event.version})"


def cmd_operate(args: argparse.Namespace) -> int:
    """restart / stop / start SERVER."""
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        getattr(sup, args.command)(args.server)
    print(f"{args.command} {args.server}: done")
    return 0


def cmd_resources(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        resources = sup.list_resources(args.server, timeout=args.timeout)
    if args.json:
        _print_json([msgspec.to_builtins(resource) for resource in resources])
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
        _print_json([msgspec.to_builtins(template) for template in templates])
    else:
        rows = [(t.server, t.uri_template, t.name, _first_line(t.description, 50)) for t in templates]
        _print_table(("SERVER", "URI_TEMPLATE", "NAME", "DESCRIPTION"), rows)
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        result = sup.read_resource(args.server, args.uri, timeout=args.timeout)
    if args.json:
        _print_json(msgspec.to_builtins(result))
    else:
        print(result.text)
    return 0


def cmd_prompts(args: argparse.Namespace) -> int:
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        prompts = sup.list_prompts(args.server, timeout=args.timeout)
    if args.json:
        _print_json([msgspec.to_builtins(prompt) for prompt in prompts])
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
        raise CliError(f"ARGS_JSON is not valid JSON: {exc}", EXIT_USAGE) from exc
    if not isinstance(arguments, dict) or not all(isinstance(v, str) for v in arguments.values()):
        raise CliError('ARGS_JSON must be a JSON object of strings, e.g. \'{"city": "Paris"}\'', EXIT_USAGE)
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        result = sup.get_prompt(args.name, arguments, server=args.server, timeout=args.timeout)
    if args.json:
        _print_json(msgspec.to_builtins(result))
    else:
        print(result.text)
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
            raise CliError(exc.message, EXIT_USAGE) from exc
    if args.json:
        _print_json(msgspec.to_builtins(summary))
        return 0
    print(f"reloaded {summary.config}")
    for label in ("added", "removed", "changed", "unchanged", "settings"):
        print(f"{label + ':':<11}{', '.join(getattr(summary, label)) or '-'}")
    return 0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


# ---------------------------------------------------------------- parser


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
    parser = argparse.ArgumentParser(
        prog="mcp-supervisor",
        description="Run every MCP server in its own supervised worker process, and call all their "
        "tools through one registry (names mcp_{server}_{tool}).",
        epilog="Start with 'mcp-supervisor run config/mcp.json', then in another shell "
        "'mcp-supervisor wait' and 'mcp-supervisor tools'.",
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
    keys.set_defaults(func=cmd_keygen)

    wait = sub.add_parser("wait", parents=[common], help="return when every enabled server is ready")
    wait.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")
    wait.set_defaults(func=cmd_wait)

    tools = sub.add_parser("tools", parents=[common], help="list every tool in the registry")
    tools.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    tools.set_defaults(func=cmd_tools)

    call = sub.add_parser("call", parents=[common], help="call a tool and print its text result")
    call.add_argument("name", help="the prefixed tool name, e.g. mcp_time_get_current_time")
    call.add_argument("arguments", nargs="?", default="{}", metavar="ARGS_JSON", help="a JSON object")
    call.add_argument("--timeout", type=float, help="seconds (default: the server's toolTimeout)")
    call.add_argument("--json", action="store_true", help="print the whole result as JSON")
    call.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="print the server's progress notifications on stderr (default: when stderr is a terminal)",
    )
    call.set_defaults(func=cmd_call)

    status = sub.add_parser("status", parents=[common], help="one row per server")
    status.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    status.set_defaults(func=cmd_status)

    events = sub.add_parser(
        "events",
        parents=[common],
        help="print registry changes (tools added, removed, changed) and server state changes as they happen",
    )
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.add_argument("--count", type=int, default=0, help="exit after this many events (default: never)")
    events.set_defaults(func=cmd_events)
    listings: tuple[tuple[str, Callable[[argparse.Namespace], int], str], ...] = (
        ("resources", cmd_resources, "list resources (of every ready server, or of SERVER)"),
        ("resource-templates", cmd_resource_templates, "list resource templates (URIs to read with 'read')"),
        ("prompts", cmd_prompts, "list prompts under their prefixed names (mcp_{server}_{prompt})"),
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
    read.set_defaults(func=cmd_read)

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
    prompt.set_defaults(func=cmd_prompt)

    for name, text in (
        ("restart", "restart one server's worker (also starts a stopped or failed one); counters reset"),
        ("stop", "stop one server; it stays stopped until 'start' or 'restart'"),
        ("start", "start a stopped or failed server"),
    ):
        operate = sub.add_parser(name, parents=[common], help=text)
        operate.add_argument("server")
        operate.set_defaults(func=cmd_operate)

    reload = sub.add_parser(
        "reload",
        parents=[common],
        help="re-read the config file and apply what changed (as SIGHUP does)",
        description="Re-read the config file the supervisor was started with: added servers start, "
        "removed ones stop, changed ones restart with their new config, the others are not touched. "
        "A file with any problem is rejected as a whole (exit code 2) and nothing changes.",
    )
    reload.add_argument("--json", action="store_true", help="print the summary as JSON")
    reload.set_defaults(func=cmd_reload)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except CliError as exc:
        print(f"mcp-supervisor: error: {exc}", file=sys.stderr)
        return exc.code
    except SupervisorUnreachableError as exc:
        print(f"mcp-supervisor: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except SupervisorError as exc:
        print(f"mcp-supervisor: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (ValueError, zmq.ZMQError) as exc:
        print(f"mcp-supervisor: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
