"""The commands that change what the supervisor runs: ``restart``, ``stop`` and ``start`` (one
server), ``reload`` (the config file again, as SIGHUP does) and ``shutdown`` (the supervisor itself,
as SIGTERM does).

Above: ``supervisor.cli.main``, which parses the arguments (declared in ``supervisor.cli.arguments``)
and calls one ``cmd_*`` function with them; this module is loaded only then. Below: the blocking
client stub (``supervisor.client.blocking``: a ``Restart``, ``Stop``, ``Start``, ``Reload`` or
``Shutdown`` request) and ``supervisor.cli.output``. Failures are raised as ``CliError``
(``supervisor.cli.exit_codes``) or the client's ``SupervisorError``, which ``main`` maps.

``shutdown`` returns once the supervisor has agreed; with ``--wait`` (the default) it then pings
until nothing answers at the endpoint (and an ipc endpoint's socket file is gone, so that a ping a
busy supervisor answers late is not taken for its end): the supervisor closes its front socket
last, after every worker and server is reaped, so a script that goes on knows they are gone.
"""

from __future__ import annotations

import argparse
import time
from typing import Final

import msgspec

from supervisor.cli.arguments import several
from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.cli.output import print_json
from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import BadRequestError, SupervisorUnreachableError
from supervisor.protocol import MAX_GRACE
from supervisor.shared.paths import ipc_path

__all__ = ["SHUTDOWN_WAIT", "STILL_ANSWERS", "cmd_operate", "cmd_reload", "cmd_shutdown", "gone"]

GONE_POLL_TIMEOUT: Final = 0.5  # seconds a ping of `shutdown` waits before the supervisor counts as gone
GONE_POLL_INTERVAL: Final = 0.2  # seconds between those pings
SHUTDOWN_WAIT: Final = 60.0  # seconds `shutdown` waits for the supervisor to go (beyond --grace)


def cmd_operate(args: argparse.Namespace) -> int:
    """restart / stop / start SERVER; ``--json``: the server's state once the supervisor has acted."""
    if several(args):
        from supervisor.cli.federated_commands import cmd_operate as federated

        return federated(args)
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        getattr(sup, args.command)(args.server)
        if not args.json:
            print(f"{args.command} {args.server}: done")
            return 0
        state = next((row.state for row in sup.status() if row.server == args.server), None)
    print_json({"server": args.server, "action": args.command, "state": state})
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    if several(args):
        from supervisor.cli.federated_commands import cmd_reload as federated

        return federated(args)
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


def cmd_shutdown(args: argparse.Namespace) -> int:
    """Ask the supervisor to stop as SIGTERM does; with ``--wait``, return once it no longer answers."""
    if args.grace is not None and not 0 <= args.grace <= MAX_GRACE:  # NaN too
        raise CliError(f"--grace must be 0 to {MAX_GRACE:g} seconds, not {args.grace:g}", ExitCode.USAGE)
    if several(args):
        from supervisor.cli.federated_commands import cmd_shutdown as federated

        return federated(args)
    wait = args.timeout if args.timeout is not None else SHUTDOWN_WAIT + (args.grace or 0.0)
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        sup.shutdown(grace=args.grace)
    if args.wait and not gone(sup.endpoint, args.keys, time.monotonic() + wait):
        raise CliError(STILL_ANSWERS.format(wait), ExitCode.TIMEOUT)
    state = "stopped" if args.wait else "stopping"
    if args.json:
        print_json({"action": "shutdown", "endpoint": sup.endpoint, "state": state})
    else:
        print(f"shutdown: the supervisor at {sup.endpoint} {'has stopped' if args.wait else 'is stopping'}")
    return 0


STILL_ANSWERS: Final = "the supervisor still answers after {:g} s (draining or stopping)"


def gone(endpoint: str, keys: str | None, deadline: float) -> bool:
    """Whether no supervisor answers at ``endpoint`` (and its ipc socket file is gone) by ``deadline``."""
    with SupervisorClient(endpoint, request_timeout=GONE_POLL_TIMEOUT, keys=keys) as sup:
        socket_file = ipc_path(sup.endpoint)
        while time.monotonic() < deadline:
            try:
                sup.ping()
            except SupervisorUnreachableError:
                if socket_file is None or not socket_file.exists():
                    return True
            time.sleep(GONE_POLL_INTERVAL)
    return False
