"""``mcp-supervisor keygen [DIR] [--client-only]``: the CurveZMQ key files a key directory lacks, and
where each one goes.

Above: ``supervisor.cli.main``, which parses the arguments (declared in ``supervisor.cli.arguments``)
and calls ``cmd_keygen``; this module is loaded only then. Below: ``supervisor.security.keys``, which
makes the files (secret ones mode 0600; existing keys are kept), and ``supervisor.cli.output``. A key
directory that cannot be written is a ``CliError`` with the usage exit code.
"""

from __future__ import annotations

import argparse

from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.cli.output import print_json
from supervisor.security.keys import DEFAULT_KEY_DIR, KEYS_ENV, KeyFileError, key_dir, keygen

__all__ = ["cmd_keygen"]


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
