"""The commands that list and use what the servers offer through the registry: ``tools``, ``call``,
``resources``, ``resource-templates``, ``read``, ``prompts`` and ``prompt``.

Above: ``supervisor.cli.main``, which parses the arguments (declared in ``supervisor.cli.arguments``)
and calls one ``cmd_*`` function with them; this module is loaded only then. Below: the blocking
client stub (``supervisor.client.blocking``) and ``supervisor.cli.output``. Each command prints a
table (or with ``--json`` one JSON document) on stdout and raises ``CliError`` with its exit code
(``supervisor.cli.exit_codes``), or lets the client's ``SupervisorError`` go up to ``main``, which maps
its code; a call's progress goes to stderr. The commands that watch and operate the supervisor are in
``supervisor.cli.watch_commands`` and ``supervisor.cli.control_commands``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from supervisor.cli.arguments import several
from supervisor.cli.exit_codes import CliError, ExitCode
from supervisor.cli.output import print_failure, print_json, print_table, printable_lines
from supervisor.client.blocking import SupervisorClient
from supervisor.client.federated import FederatedClient
from supervisor.shared.terminal import printable

__all__ = [
    "cmd_call",
    "cmd_prompt",
    "cmd_prompts",
    "cmd_read",
    "cmd_resource_templates",
    "cmd_resources",
    "cmd_tools",
]


def cmd_tools(args: argparse.Namespace) -> int:
    if several(args):
        from supervisor.cli.federated_commands import cmd_tools as federated

        return federated(args)
    with SupervisorClient(args.endpoint, keys=args.keys) as sup:
        tools = sup.list_tools()
    if args.json:
        fields = ("name", "server", "original_name", "description", "input_schema")
        print_json([{f: getattr(tool, f) for f in fields} for tool in tools])
    else:
        rows = [(t.name, t.server, (t.description.strip().splitlines() or [""])[0][:60]) for t in tools]
        print_table(("TOOL", "SERVER", "DESCRIPTION"), rows)
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
        client: SupervisorClient | FederatedClient = (
            FederatedClient(args.members, keys=args.keys, identity=args.identity)
            if several(args)  # the call goes to the supervisor whose server has the tool
            else SupervisorClient(args.endpoint, keys=args.keys, identity=args.identity)
        )
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


def _listed(
    args: argparse.Namespace, key: str, ask: Callable[[Any], Any]
) -> tuple[list[Any], int, Callable[[list[Any]], None]]:
    """What ``ask`` lists, of one supervisor, or of several merged (each clash and each member that did
    not answer named on stderr); the exit code; and what prints the JSON (a list of one supervisor's,
    ``{KEY, "clashes", "unreachable"}`` of several)."""
    if not several(args):
        with SupervisorClient(args.endpoint, keys=args.keys) as sup:
            return list(ask(sup)), ExitCode.OK, lambda entries: print_json(entries)
    from supervisor.cli.federated_commands import clash_json, failure_json, federation, report

    with federation(args) as fed:
        listing = ask(fed)
    extra = {
        "clashes": [clash_json(clash) for clash in listing.clashes],
        "unreachable": [failure_json(failure) for failure in listing.failures],
    }
    code = report(listing.failures, listing.clashes)
    return listing.entries, code, lambda entries: print_json({key: entries, **extra})


def _client(args: argparse.Namespace) -> SupervisorClient | FederatedClient:
    """One supervisor's client, or several's (a request goes to the one whose server it names)."""
    if several(args):
        return FederatedClient(args.members, keys=args.keys)
    return SupervisorClient(args.endpoint, keys=args.keys)


def cmd_resources(args: argparse.Namespace) -> int:
    resources, code, dump = _listed(
        args, "resources", lambda c: c.list_resources(args.server, timeout=args.timeout)
    )
    if args.json:
        dump([msgspec.to_builtins(resource) for resource in resources])
    else:
        rows = [
            (r.server, r.uri, r.name, r.mime_type or "-", _first_line(r.description, 50)) for r in resources
        ]
        print_table(("SERVER", "URI", "NAME", "MIME", "DESCRIPTION"), rows)
    return code


def cmd_resource_templates(args: argparse.Namespace) -> int:
    ask = lambda c: c.list_resource_templates(args.server, timeout=args.timeout)  # noqa: E731
    templates, code, dump = _listed(args, "resource_templates", ask)
    if args.json:
        dump([msgspec.to_builtins(template) for template in templates])
    else:
        rows = [(t.server, t.uri_template, t.name, _first_line(t.description, 50)) for t in templates]
        print_table(("SERVER", "URI_TEMPLATE", "NAME", "DESCRIPTION"), rows)
    return code


def cmd_read(args: argparse.Namespace) -> int:
    with _client(args) as sup:
        result = sup.read_resource(args.server, args.uri, timeout=args.timeout)
    if args.json:
        print_json(msgspec.to_builtins(result))
    else:
        print(_terminal(result.text))
    return 0


def cmd_prompts(args: argparse.Namespace) -> int:
    prompts, code, dump = _listed(
        args, "prompts", lambda c: c.list_prompts(args.server, timeout=args.timeout)
    )
    if args.json:
        dump([msgspec.to_builtins(prompt) for prompt in prompts])
    else:
        rows = [
            (p.name, p.server, _prompt_arguments(p.arguments) or "-", _first_line(p.description, 50))
            for p in prompts
        ]
        print_table(("PROMPT", "SERVER", "ARGUMENTS", "DESCRIPTION"), rows)
    return code


def cmd_prompt(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise CliError(f"ARGS_JSON is not valid JSON: {exc}", ExitCode.USAGE) from exc
    if not isinstance(arguments, dict) or not all(isinstance(v, str) for v in arguments.values()):
        raise CliError(
            'ARGS_JSON must be a JSON object of strings, e.g. \'{"city": "Paris"}\'', ExitCode.USAGE
        )
    with _client(args) as sup:
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
