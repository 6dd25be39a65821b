"""Load the ``mcpServers`` JSON config (Claude Desktop / Cursor / nanobot). Each server entry is checked
on its own: a broken one becomes a :class:`ConfigProblem`, the rest still load; whole-file failures raise
:class:`ConfigError`. Messages name servers, fields and variables, never env or header values.

Above: the CLI and the supervisor, which load the file and reload it (``supervisor.daemon.reload_plan``).
Below: the data model this builds (``supervisor.config.model``, every name of which is importable from
here too), the JSON decoding and messages (``supervisor.config.json_input``), the expansion of ``${VAR}``,
``${file:PATH}`` and ``${credential:NAME}`` (``supervisor.config.expansion``), and the HTTP listener's
address check (``supervisor.shared.address``).
"""

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from supervisor.config.audit_entry import check_audit
from supervisor.config.expansion import SecretError, expand_tilde, expand_vars, header_problem, home_of
from supervisor.config.json_input import (
    Malformed,
    check_numbers,
    decode_json,
    escape,
    explain,
    fields_of,
    got,
    nesting,
    position,
    with_position,
)
from supervisor.config.model import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_TOOL_TIMEOUT,
    Config,
    ConfigError,
    ConfigProblem,
    MissingVariable,
    OAuthSpec,
    RootEntry,
    SamplingHook,
    ServerConfig,
    ServerSpec,
    SupervisorSettings,
    Transport,
)
from supervisor.config.oauth_entry import HTTP_URL, oauth_spec
from supervisor.config.restart_policy import POLICY_KEYS, RestartPolicy
from supervisor.config.sandbox_entry import SandboxConfig, server_sandbox
from supervisor.config.vscode import Unanswered, Variables, parse_inputs, read_env_file, workspace_of
from supervisor.shared.address import parse_address

__all__ = ["DEFAULT_TOOL_TIMEOUT", "Config", "ConfigError", "ConfigProblem", "MissingVariable"]
__all__ += ["OAuthSpec", "RootEntry", "SamplingHook", "ServerConfig", "ServerSpec", "SupervisorSettings"]
__all__ += ["expand_vars", "find_config", "load_config", "parse_config"]

_Env = Mapping[str, str]
_PathArg = str | os.PathLike[str] | None
_ENV_VAR = "MCP_SUPERVISOR_CONFIG"
_TRANSPORTS: dict[str, Transport] = {"stdio": "stdio", "sse": "sse", "http": "streamable-http"}
_TRANSPORTS |= {"streamable-http": "streamable-http", "streamablehttp": "streamable-http"}
_ACCEPTED = "stdio, sse, streamable-http (or its aliases streamableHttp, http)"
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


class _Problem(Exception):
    """Internal: the server entry is unusable; the text becomes a ConfigProblem."""


def _resolve(path: str | os.PathLike[str], cwd: Path, home: Path) -> Path:
    resolved = Path(expand_tilde(os.fspath(path), lambda: home))
    return resolved if resolved.is_absolute() else cwd / resolved


def _candidates(environ: _Env, cwd: Path, home: Path) -> list[Path]:
    places = [_resolve(environ[_ENV_VAR], cwd, home)] if environ.get(_ENV_VAR) else []
    return [*places, cwd / "mcp.json", cwd / "config" / "mcp.json", home / ".config/mcp-supervisor/mcp.json"]


def find_config(
    explicit: _PathArg = None,
    *,
    environ: _Env | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> Path | None:
    """Return ``explicit`` (resolved against ``cwd``, whether or not it exists) or the first
    existing file of ``$MCP_SUPERVISOR_CONFIG``, ``./mcp.json``, ``./config/mcp.json``,
    ``~/.config/mcp-supervisor/mcp.json``; ``None`` when none exists."""
    env = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    home = home_of(env) if home is None else home
    if explicit is not None and os.fspath(explicit):
        return _resolve(explicit, cwd, home)
    return next((place for place in _candidates(env, cwd, home) if place.is_file()), None)


def load_config(path: _PathArg = None, *, environ: _Env | None = None) -> Config:
    """Find (see :func:`find_config`), read and parse the config file."""
    env = os.environ if environ is None else environ
    found = find_config(path, environ=env)
    if found is None:
        looked = ", ".join(str(place) for place in _candidates(env, Path.cwd(), home_of(env)))
        raise ConfigError(f"no MCP config file found; looked for {looked} (pass a path or set {_ENV_VAR})")
    if found.is_dir():
        raise ConfigError(f"{found}: is a directory, not a config file")
    try:
        data = found.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{found}: config file does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{found}: cannot read config file: {exc.strerror or exc}") from None
    return parse_config(data, path=found, environ=env)


def parse_config(data: bytes, *, path: Path | None = None, environ: _Env | None = None) -> Config:
    """Parse config file contents; ``path`` is only used in messages and in the result.

    Total: any bytes give a ``Config`` or a :class:`ConfigError` (text that is not UTF-8, nesting too
    deep, numbers out of range included); messages escape every non-printable character."""
    env = os.environ if environ is None else environ
    where = escape(str(path)) if path is not None else "<config>"
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = position(data, exc.start)
        raise ConfigError(f"{where}: not UTF-8 text: byte 0x{data[exc.start]:02x} at {at}") from None
    try:
        return _parse(data, where, path, env)
    except Malformed as exc:
        depth, offset = nesting(data)
        at = f": {depth} levels of arrays and objects, the deepest at {position(data, offset)}"
        at = at if str(exc) == "nested too deeply" else ""
        raise ConfigError(f"{where}: {exc}{at}") from None


def _parse(data: bytes, where: str, path: Path | None, env: _Env) -> Config:
    try:
        top = decode_json(data, dict[str, msgspec.Raw])
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: top level must be a JSON object, got {got(exc)}") from None
    except Malformed:
        raise
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON: {with_position(str(exc), data)}") from None
    key = "mcpServers" if "mcpServers" in top else "servers" if "servers" in top else None
    if key is None:
        found = escape(", ".join(repr(k) for k in list(top)[:10]) or "none")
        raise ConfigError(f'{where}: no "mcpServers" object at the top level (keys found: {found})')
    try:
        entries = decode_json(top[key], dict[str, msgspec.Raw])
    except msgspec.ValidationError as exc:
        raise ConfigError(f'{where}: "{key}" must be an object of server entries, got {got(exc)}') from None
    settings, defaults = _supervision(top.get("supervisor"), where)
    try:
        inputs = parse_inputs(top.get("inputs"))
    except ValueError as exc:
        raise ConfigError(escape(f"{where}: {exc}")) from None
    variables = Variables(env, inputs, workspace_of(path), home_of(env))
    folder = None if path is None else path.resolve().parent  # where a relative ${file:} is read
    servers: dict[str, ServerSpec] = {}
    problems: list[ConfigProblem] = []
    for name, raw in entries.items():
        try:
            servers[name] = _build_server(name, raw, env, defaults, variables, folder, settings.sandbox)
        except _Problem as exc:
            problems.append(ConfigProblem(server=name, message=escape(f"server {name!r}: {exc}")))
    return Config(path=path, servers=servers, problems=problems, settings=settings, defaults=defaults)


def _split_policy(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(policy keys, the rest) of a JSON object."""
    policy = {key: value for key, value in data.items() if key in POLICY_KEYS}
    return policy, {key: value for key, value in data.items() if key not in POLICY_KEYS}


def _supervision(raw: msgspec.Raw | None, where: str) -> tuple[SupervisorSettings, RestartPolicy]:
    """The top-level ``"supervisor"`` object: supervisor settings plus default policy fields."""
    if raw is None:
        return SupervisorSettings(), RestartPolicy()

    def fail(text: str) -> ConfigError:
        return ConfigError(escape(f'{where}: "supervisor": {text}'))

    data = fields_of(raw, fail)
    try:
        policy, rest = _split_policy(msgspec.convert(data, dict[str, Any]))
        settings, defaults = msgspec.convert(rest, SupervisorSettings), msgspec.convert(policy, RestartPolicy)
    except msgspec.ValidationError as exc:
        raise fail(explain(str(exc), SupervisorSettings)) from None
    check_numbers(settings, fail)
    check_numbers(defaults, fail)
    field = "metrics"
    try:
        if settings.metrics is not None:
            parse_address(settings.metrics)
        field = "audit"
        check_audit(settings.audit)
    except ValueError as exc:
        raise fail(f"field '{field}': {exc}") from None
    return settings, defaults


def _declared_transport(cfg: ServerConfig) -> Transport | None:
    declared: dict[str, Transport] = {}
    for key, value in (("type", cfg.type), ("transport", cfg.transport)):
        if value is None:
            continue
        normalised = _TRANSPORTS.get(value.strip().lower())
        if normalised is None:
            raise _Problem(f"unknown {key} {value!r}; accepted: {_ACCEPTED}")
        declared[key] = normalised
    if len(set(declared.values())) > 1:
        raise _Problem(f'"type" {cfg.type!r} and "transport" {cfg.transport!r} disagree; give only one')
    return next(iter(declared.values()), None)


def _infer_transport(command: str | None, url: str | None) -> Transport:
    if command:
        return "stdio"
    if url:
        return "sse" if re.split(r"[?#]", url)[0].rstrip("/").endswith("/sse") else "streamable-http"
    raise _Problem('needs "command" (for stdio) or "url" (for sse / streamable-http)')


def _build_server(
    name: str,
    raw: msgspec.Raw,
    environ: _Env,
    defaults: RestartPolicy,
    variables: Variables | None = None,
    folder: Path | None = None,
    sandbox_default: SandboxConfig | bool | None = None,
) -> ServerSpec:
    if not name:
        raise _Problem("server name must not be empty")
    if len(name) > 64:
        raise _Problem("server name is longer than 64 characters")
    if not name.isprintable():
        raise _Problem("server name must be printable: no newline, tab, escape or other control character")
    entry = fields_of(raw, _Problem)
    overrides, rest = _split_policy(entry) if isinstance(entry, dict) else ({}, entry)
    try:
        cfg = msgspec.convert(rest, ServerConfig)
        policy = (
            msgspec.convert(msgspec.to_builtins(defaults) | overrides, RestartPolicy)
            if overrides
            else defaults
        )
    except msgspec.ValidationError as exc:
        raise _Problem(explain(str(exc))) from None
    check_numbers(cfg, _Problem)
    check_numbers(policy, _Problem)
    declared = _declared_transport(cfg)
    if not cfg.tool_timeout > 0:
        raise _Problem(f'"toolTimeout" must be greater than 0 seconds, got {cfg.tool_timeout}')

    def expand(text: str, where: str, tilde: bool = False) -> str:
        if cfg.disabled:  # disabled servers are kept verbatim and never fail on variables
            return text
        try:
            expanded = expand_vars(text, environ, variables, folder=folder)
        except MissingVariable as exc:
            var, hint = exc.name, f"write ${{{exc.name}:-default}} to give a default"
            raise _Problem(f"variable {var} in {where} is not set ({hint})") from None
        except (Unanswered, SecretError) as exc:
            raise _Problem(f"{where}: {exc}") from None
        return expand_tilde(expanded, lambda: home_of(environ)) if tilde else expanded

    command = None if cfg.command is None else expand(cfg.command, "command", tilde=True)
    args = tuple(expand(arg, f"args[{i}]") for i, arg in enumerate(cfg.args))
    env = {key: expand(value, f"env.{key}") for key, value in cfg.env.items()}
    if cfg.env_file is not None and not cfg.disabled:  # env wins, as in VS Code
        env = _env_file(expand(cfg.env_file, "envFile", tilde=True), variables) | env
    cwd = None if cfg.cwd is None else expand(cfg.cwd, "cwd", tilde=True)
    url = None if cfg.url is None else expand(cfg.url, "url")
    headers = {key: expand(value, f"headers.{key}") for key, value in cfg.headers.items()}
    if not cfg.disabled and (bad := header_problem(headers)) is not None:
        raise _Problem(bad)
    transport = declared or _infer_transport(command, url)
    if transport == "stdio" and not command:
        raise _Problem('transport stdio needs a non-empty "command"')
    if transport != "stdio":
        if not url:
            raise _Problem(f'transport {transport} needs a "url"')
        if not cfg.disabled and not HTTP_URL.match(url):
            raise _Problem('"url" must be an http:// or https:// URL')
    roots = tuple(_root(entry, f"roots[{i}]", expand) for i, entry in enumerate(cfg.roots))
    sampling = None if cfg.sampling == "caller" else cfg.sampling
    if sampling is not None:
        sampling = SamplingHook(
            command=expand(sampling.command, "sampling.command", tilde=True),
            args=[expand(arg, f"sampling.args[{i}]") for i, arg in enumerate(sampling.args)],
            timeout=sampling.timeout,
        )
    oauth = oauth_spec(cfg.oauth, transport, headers, expand, _Problem)
    try:
        paths = lambda text, where: expand(text, where, tilde=True)  # noqa: E731
        sandbox = server_sandbox(cfg.sandbox, sandbox_default, transport == "stdio", cfg.disabled, paths)
    except ValueError as exc:
        raise _Problem(str(exc)) from None
    enabled_tools = None if cfg.enabled_tools is None else _patterns(cfg.enabled_tools, "enabledTools")
    disabled_tools = _patterns(cfg.disabled_tools, "disabledTools")
    return ServerSpec(
        name,
        transport,
        command,
        args,
        env,
        cwd,
        url,
        headers,
        cfg.tool_timeout,
        cfg.disabled,
        policy,
        roots=roots,
        elicitation=cfg.elicitation,
        sampling=sampling,
        refresh_interval=cfg.refresh_interval,
        enabled_tools=enabled_tools,
        disabled_tools=disabled_tools,
        oauth=oauth,
        sampling_caller=cfg.sampling == "caller",
        retry_idempotent=cfg.retry_idempotent,
        sandbox=sandbox,
        audit_arguments=cfg.audit_arguments,
        **_pool_fields(cfg),
    )


def _env_file(path: str, variables: Variables | None) -> dict[str, str]:
    """An entry's ``envFile``, relative to its workspace folder (the config's folder)."""
    file = Path(path)
    if not file.is_absolute() and variables is not None and variables.workspace is not None:
        file = variables.workspace / file
    try:
        return read_env_file(file)
    except Unanswered as exc:
        raise _Problem(str(exc)) from None


def _pool_fields(cfg: ServerConfig) -> dict[str, Any]:
    """``replicas``, ``scope`` and the session bounds, checked against each other."""
    if cfg.oauth not in (None, False) and (cfg.scope == "client" or cfg.replicas != 1):
        # Its workers would share one token file: a refresh token used by one is spent for the others.
        raise _Problem('an "oauth" server runs one worker: "replicas" and "scope": "client" need headers')
    if cfg.scope == "client":
        if cfg.replicas != 1:
            raise _Problem('"replicas" is for shared servers; with "scope": "client" each client gets one')
        return {
            "scope": "client",
            "idle_timeout": DEFAULT_IDLE_TIMEOUT if cfg.idle_timeout is None else cfg.idle_timeout,
            "max_sessions": DEFAULT_MAX_SESSIONS if cfg.max_sessions is None else cfg.max_sessions,
        }
    for field, value in (("idleTimeout", cfg.idle_timeout), ("maxSessions", cfg.max_sessions)):
        if value is not None:
            raise _Problem(f'"{field}" applies only with "scope": "client"')
    return {"replicas": cfg.replicas}


def _patterns(patterns: list[str], field: str) -> tuple[str, ...]:
    """A tool view's patterns (``supervisor.config.tool_filters``), each a non-empty tool name or glob."""
    for i, pattern in enumerate(patterns):
        if not pattern:
            raise _Problem(f"field '{field}[{i}]': must be a non-empty tool name or glob pattern")
    return tuple(patterns)


def _root(entry: str | RootEntry, where: str, expand: Callable[..., str]) -> RootEntry:
    """A root as a ``file://`` URI: absolute paths (``~`` allowed) are turned into one."""
    uri, name = (entry.uri, entry.name) if isinstance(entry, RootEntry) else (entry, None)
    where = f"{where}.uri" if isinstance(entry, RootEntry) else where
    text = expand(uri, where, tilde=True)
    if text.startswith("file://"):
        return RootEntry(uri=text, name=name)
    if _SCHEME_RE.match(text):
        raise _Problem(f"{where} must be a file:// URI or an absolute path, got {text!r}")
    if not os.path.isabs(text):
        raise _Problem(f"{where} must be an absolute path (or a file:// URI), got {text!r}")
    return RootEntry(uri=Path(text).as_uri(), name=name)
