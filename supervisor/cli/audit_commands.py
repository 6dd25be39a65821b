"""The ``audit`` command: the audit trail's records, filtered, from the running supervisor or its files.

Above: ``supervisor.cli.main``, which parses the arguments (declared in ``supervisor.cli.arguments``)
and calls ``cmd_audit``; this module is loaded only then. Below: the blocking client stub (a
``GetAudit`` request, answered by the supervisor from its own files, so it works against a remote
one), or with ``--file`` the files themselves (``supervisor.daemon.audit.files``: the same reading, no
supervisor needed); ``supervisor.cli.output`` prints. Failures are raised as ``CliError``
(``supervisor.cli.exit_codes``) or the client's ``SupervisorError``, which ``main`` maps.

Records come newest first from either source; they are printed newest last, as a table (time,
identity, kind, tool, outcome, ms) or, with ``--json``, one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.cli.output import print_json_line, print_table
from supervisor.daemon.audit.files import Filters, parse_since, read_trail
from supervisor.protocol import AUDIT_LIMIT

__all__ = ["cmd_audit"]


def cmd_audit(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= AUDIT_LIMIT:
        raise CliError(f"--limit must be 1 to {AUDIT_LIMIT}, not {args.limit}", ExitCode.USAGE)
    try:
        since = None if args.since is None else parse_since(args.since, time.time())
    except ValueError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from exc
    filters = Filters(since, args.identity, args.tool, args.server)
    lines = _from_file(Path(args.file), filters, args.limit) if args.file else _asked(args, filters)
    records = [_record(text) for text in reversed(lines)]  # newest last
    if args.json:
        for record in records:
            print_json_line(record)
        return 0
    header = ("TIME", "IDENTITY", "KIND", "TOOL", "OUTCOME", "MS")
    keys = ("time", "identity", "kind", "tool", "outcome", "ms")
    print_table(header, [tuple(str(record.get(key, "-")) for key in keys) for record in records])
    return 0


def _asked(args: argparse.Namespace, filters: Filters) -> list[str]:
    """The records, from the running supervisor (its ``GetAudit``)."""
    from supervisor.client.blocking import SupervisorClient  # ZeroMQ: only without --file

    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        reply = sup.audit(
            since=filters.since,
            identity=filters.identity,
            tool=filters.tool,
            server=filters.server,
            limit=args.limit,
        )
        if reply.stats is not None and not reply.stats.path:
            print(f'the supervisor at {sup.endpoint} keeps no audit trail ("audit": false)', file=sys.stderr)
    return reply.records


def _from_file(path: Path, filters: Filters, limit: int) -> list[str]:
    """The records, from the trail's files (``path`` and its rotated ``path.1``, ``path.2``, ...)."""
    if not path.exists():
        raise CliError(f"no audit trail at {path}: no such file", ExitCode.USAGE)
    try:
        return read_trail(path, filters, limit)
    except OSError as exc:
        raise CliError(f"cannot read the audit trail {path}: {exc.strerror or exc}", ExitCode.FAILED) from exc


def _record(text: str) -> dict[str, Any]:
    record = json.loads(text)  # each is a JSON object: read_trail keeps no other line
    assert isinstance(record, dict)
    return record
