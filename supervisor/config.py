"""Load the ``mcpServers`` JSON config (Claude Desktop / Cursor / nanobot). Each server entry is checked
on its own: a broken one becomes a :class:`ConfigProblem`, the rest still load; whole-file failures raise
:class:`ConfigError`. Messages name servers, fields and variables, never env or header values."""

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from supervisor.policy import POLICY_KEYS, RestartPolicy

__all__ = ["DEFAULT_TOOL_TIMEOUT", "Config", "ConfigError", "ConfigProblem", "MissingVariable"]
__all__ += ["ServerConfig", "ServerSpec", "SupervisorSettings", "expand_vars", "find_config", "load_config"]
__all__ += ["parse_config"]

DEFAULT_TOOL_TIMEOUT = 30.0
"""Seconds a tool call may run when neither the caller nor the config says otherwise."""

_Env = Mapping[str, str]
_PathArg = str | os.PathLike[str] | None
_ENV_VAR = "MCP_SUPERVISOR_CONFIG"
_Transport = Literal["stdio", "sse", "streamable-http"]
_TRANSPORTS: dict[str, _Transport] = {"stdio": "stdio", "sse": "sse", "http": "streamable-http"}
_TRANSPORTS |= {"streamable-http": "streamable-http", "streamablehttp": "streamable-http"}
_ACCEPTED = "stdio, sse, streamable-http (or its aliases streamableHttp, http)"
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_AT_RE = re.compile(r"(?P<text>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.DOTALL)
_HTTP_URL_RE = re.compile(r"https?://[^/?#\s]", re.IGNORECASE)
_GOT_RE = re.compile(r"got `([^`]*)`")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_INT_RANGE = range(-(2**63), 2**63)  # what msgpack carries; a larger integer is a typo, never a setting


class RootEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One root a server is told about on ``roots/list``: a ``file://`` URI (or an absolute path)."""

    uri: str
    name: str | None = None


class SamplingHook(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A program that answers a server's ``sampling/createMessage``: request params in, result out (JSON)."""

    command: str
    args: list[str] = []
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 60.0  # seconds; then the request is refused


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """One entry of ``mcpServers`` exactly as written in the file."""

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    type: str | None = None
    transport: str | None = None
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT  # "toolTimeout" in the file; must be > 0
    disabled: bool = False
    roots: list[str | RootEntry] = []  # answered on roots/list; none: roots are not offered
    elicitation: Literal["decline", "defaults"] = "decline"
    sampling: SamplingHook | None = None  # none: sampling is not offered, and refused
    refresh_interval: Annotated[float, msgspec.Meta(gt=0)] | None = None  # seconds between tool re-lists


class SupervisorSettings(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    """Supervisor-wide settings: the top-level ``"supervisor"`` object, less the policy defaults in it."""

    shutdown_grace: Annotated[float, msgspec.Meta(ge=0)] = 5.0  # seconds in-flight calls get on shutdown
    heartbeat_interval: Annotated[float, msgspec.Meta(gt=0)] = 1.0  # seconds between worker heartbeats
    heartbeat_timeout: Annotated[float, msgspec.Meta(gt=0)] = 3.0  # silence after which a worker is dead
    worker_spawn: Literal["zygote", "exec"] = "zygote"  # fork workers from a pre-imported process, or exec
    # Calls (and resources and prompts requests) in flight: one client's, and everyone's; past either,
    # a new one is answered OVERLOADED at once.
    max_calls_per_client: Annotated[int, msgspec.Meta(gt=0)] = 1000
    max_calls_in_flight: Annotated[int, msgspec.Meta(gt=0)] = 10_000
    # Replies queued for one client that does not read them; past it, replies to it are dropped (and its
    # calls in flight with them). Read when the supervisor starts.
    max_queued_replies: Annotated[int, msgspec.Meta(gt=0, le=2**31 - 1)] = 1000  # a ZeroMQ HWM is a C int


@dataclass(frozen=True)
class ServerSpec:
    """A validated, expanded server, ready to start (``env``/``headers`` are left out of repr)."""

    name: str
    transport: _Transport
    command: str | None
    args: tuple[str, ...]
    env: dict[str, str] = field(repr=False)
    cwd: str | None
    url: str | None
    headers: dict[str, str] = field(repr=False)
    tool_timeout: float
    disabled: bool
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    roots: tuple[RootEntry, ...] = ()
    elicitation: Literal["decline", "defaults"] = "decline"
    sampling: SamplingHook | None = None
    refresh_interval: float | None = None  # re-list the tools this often, for servers that never notify


@dataclass(frozen=True)
class ConfigProblem:
    """Why one server (or, with ``server=None``, the file) was skipped; a single line."""

    server: str | None
    message: str


@dataclass(frozen=True)
class Config:
    path: Path | None
    servers: dict[str, ServerSpec]  # file order; disabled servers included with disabled=True
    problems: list[ConfigProblem]  # servers that were skipped, with why
    settings: SupervisorSettings = field(default_factory=SupervisorSettings)
    defaults: RestartPolicy = field(default_factory=RestartPolicy)  # for servers that set no policy


class ConfigError(Exception):
    """The config file as a whole cannot be used; the message names the path and the reason."""


class MissingVariable(ConfigError):
    """``${name}`` was used without a default and ``name`` is not set."""

    def __init__(self, name: str) -> None:
        super().__init__(f"variable {name} is not set")
        self.name = name


class _Problem(Exception):
    """Internal: the server entry is unusable; the text becomes a ConfigProblem."""


def expand_vars(text: str, environ: _Env) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}`` (default also when VAR is empty); anything else,
    e.g. a lone ``$`` or an unclosed ``${``, stays. Raises :class:`MissingVariable` for unset ``${VAR}``."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = environ.get(name)
        if default is not None:
            return value or default
        if value is None:
            raise MissingVariable(name)
        return value

    return _VAR_RE.sub(substitute, text)


def _home(environ: _Env) -> Path:
    home = environ.get("HOME")
    return Path(home) if home else Path.home()


def _expand_tilde(text: str, home: Callable[[], Path]) -> str:
    if text == "~" or text.startswith("~/"):
        return str(home()) + text[1:]
    return text


def _resolve(path: str | os.PathLike[str], cwd: Path, home: Path) -> Path:
    resolved = Path(_expand_tilde(os.fspath(path), lambda: home))
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
    home = _home(env) if home is None else home
    if explicit is not None and os.fspath(explicit):
        return _resolve(explicit, cwd, home)
    return next((place for place in _candidates(env, cwd, home) if place.is_file()), None)


def load_config(path: _PathArg = None, *, environ: _Env | None = None) -> Config:
    """Find (see :func:`find_config`), read and parse the config file."""
    env = os.environ if environ is None else environ
    found = find_config(path, environ=env)
    if found is None:
        looked = ", ".join(str(place) for place in _candidates(env, Path.cwd(), _home(env)))
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


def _got(message: object) -> str:
    match = _GOT_RE.search(str(message))
    return match.group(1) if match else "something else"


def _with_position(message: str, data: bytes) -> str:
    match = re.search(r"\(byte (\d+)\)", message)
    if match is None:
        return "unexpected end of file" if "truncated" in message else message
    return message.replace(match.group(0), f"({_position(data, int(match.group(1)))})")


def parse_config(data: bytes, *, path: Path | None = None, environ: _Env | None = None) -> Config:
    """Parse config file contents; ``path`` is only used in messages and in the result.

    Total: any bytes give a ``Config`` or a :class:`ConfigError` (text that is not UTF-8, nesting too
    deep, numbers out of range included); messages escape every non-printable character."""
    env = os.environ if environ is None else environ
    where = _escape(str(path)) if path is not None else "<config>"
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = _position(data, exc.start)
        raise ConfigError(f"{where}: not UTF-8 text: byte 0x{data[exc.start]:02x} at {at}") from None
    try:
        return _parse(data, where, path, env)
    except _Malformed as exc:
        depth, offset = _deepest(data)
        at = f": {depth} levels of arrays and objects, the deepest at {_position(data, offset)}"
        at = at if str(exc) == "nested too deeply" else ""
        raise ConfigError(f"{where}: {exc}{at}") from None


def _parse(data: bytes, where: str, path: Path | None, env: _Env) -> Config:
    try:
        top = _json(data, dict[str, msgspec.Raw])
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: top level must be a JSON object, got {_got(exc)}") from None
    except _Malformed:
        raise
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON: {_with_position(str(exc), data)}") from None
    key = "mcpServers" if "mcpServers" in top else "servers" if "servers" in top else None
    if key is None:
        found = _escape(", ".join(repr(k) for k in list(top)[:10]) or "none")
        raise ConfigError(f'{where}: no "mcpServers" object at the top level (keys found: {found})')
    try:
        entries = _json(top[key], dict[str, msgspec.Raw])
    except msgspec.ValidationError as exc:
        raise ConfigError(f'{where}: "{key}" must be an object of server entries, got {_got(exc)}') from None
    settings, defaults = _supervision(top.get("supervisor"), where)
    servers: dict[str, ServerSpec] = {}
    problems: list[ConfigProblem] = []
    for name, raw in entries.items():
        try:
            servers[name] = _build_server(name, raw, env, defaults)
        except _Problem as exc:
            problems.append(ConfigProblem(server=name, message=_escape(f"server {name!r}: {exc}")))
    return Config(path=path, servers=servers, problems=problems, settings=settings, defaults=defaults)


class _Malformed(msgspec.DecodeError):
    """Internal: bytes msgspec cannot even skip (too deep); as ``supervisor.protocol.MalformedMessage``,
    which this module cannot import (protocol imports config)."""


def _json(data: bytes, type: Any = Any) -> Any:
    """``msgspec.json.decode``, total: invalid UTF-8 and deep nesting are ``_Malformed`` (a DecodeError)."""
    try:
        return msgspec.json.decode(data, type=type)
    except UnicodeDecodeError as exc:
        raise _Malformed(f"a string is not valid UTF-8 ({exc.reason})") from None
    except RecursionError:
        raise _Malformed("nested too deeply") from None


def _fields(raw: bytes, fail: Callable[[str], Exception]) -> Any:
    """A JSON value; a number out of range (``1e999``, which msgspec will not make ``inf``) is reported
    through ``fail`` naming the top-level field it is in."""
    try:
        return _json(raw)
    except msgspec.ValidationError as exc:  # the only one decoding to Any raises: "Number out of range"
        try:
            fields = _json(raw, dict[str, msgspec.Raw])
        except msgspec.ValidationError:
            raise fail(_explain(str(exc))) from None
        for key, value in fields.items():
            try:
                _json(value)
            except msgspec.ValidationError:
                raise fail(f"field {key!r}: number out of range") from None
        raise fail(_explain(str(exc))) from None


def _check_numbers(value: msgspec.Struct, fail: Callable[[str], Exception], prefix: str = "") -> None:
    """Every float of ``value`` (and of structs in it) is finite, every int fits in 64 bits."""
    for info in msgspec.structs.fields(value):
        item = getattr(value, info.name)
        name = f"{prefix}{info.encode_name}"
        if isinstance(item, msgspec.Struct):
            _check_numbers(item, fail, f"{name}.")
        elif isinstance(item, float) and not math.isfinite(item):
            raise fail(f"field {name!r}: must be a finite number of seconds, got {item}")
        elif isinstance(item, int) and not isinstance(item, bool) and item not in _INT_RANGE:
            raise fail(f"field {name!r}: number out of range")


def _escape(text: str) -> str:
    """``text`` with every non-printable character (newline, escape, ...) as its Python escape, so a
    message never carries control characters into a log or a terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _deepest(data: bytes) -> tuple[int, int]:
    """How deeply arrays and objects nest in JSON text, and the offset where that depth is first reached."""
    depth = deepest = where = 0
    in_string = escaped = False
    for offset, byte in enumerate(data):
        if in_string:
            escaped, in_string = (False, True) if escaped else (byte == 0x5C, byte != 0x22)  # \ and "
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, offset
        elif byte in b"]}":
            depth -= 1
    return deepest, where


def _position(data: bytes, offset: int) -> str:
    line, line_start = data.count(b"\n", 0, offset) + 1, data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    return f"line {line}, column {column}"


def _split_policy(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(policy keys, the rest) of a JSON object."""
    policy = {key: value for key, value in data.items() if key in POLICY_KEYS}
    return policy, {key: value for key, value in data.items() if key not in POLICY_KEYS}


def _supervision(raw: msgspec.Raw | None, where: str) -> tuple[SupervisorSettings, RestartPolicy]:
    """The top-level ``"supervisor"`` object: supervisor settings plus default policy fields."""
    if raw is None:
        return SupervisorSettings(), RestartPolicy()

    def fail(text: str) -> ConfigError:
        return ConfigError(_escape(f'{where}: "supervisor": {text}'))

    data = _fields(raw, fail)
    try:
        policy, rest = _split_policy(msgspec.convert(data, dict[str, Any]))
        settings, defaults = msgspec.convert(rest, SupervisorSettings), msgspec.convert(policy, RestartPolicy)
    except msgspec.ValidationError as exc:
        raise fail(_explain(str(exc), SupervisorSettings)) from None
    _check_numbers(settings, fail)
    _check_numbers(defaults, fail)
    return settings, defaults


_NESTED: dict[str, type[msgspec.Struct]] = {"roots": RootEntry, "sampling": SamplingHook}


def _explain(message: str, struct: type[msgspec.Struct] = ServerConfig) -> str:
    """Turn a msgspec validation message into one that names the field in the file."""
    match = _AT_RE.fullmatch(message)
    text, path = (match.group("text"), (match.group("path") or "").lstrip(".")) if match else (message, "")
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", text, re.DOTALL)
    if unknown:
        name = unknown.group(1)
        nested = _NESTED.get(re.split(r"[.\[]", path)[0]) if path else None
        known = [f.encode_name for f in msgspec.structs.fields(nested or struct)]
        known += [] if nested else sorted(POLICY_KEYS)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(known)}"
        return f"unknown field {name!r}{f' in {path}' if path else ''} ({hint})"
    text = _escape(text.replace("`", "'"))
    text = text[:1].lower() + text[1:]
    if path and path != "[...]":  # "[...]": a key of a mapping msgspec does not name
        return f"field {path!r}: {text}"
    return (
        f"entry must be a JSON object, got {_got(message)}" if text.startswith("expected 'object'") else text
    )


def _declared_transport(cfg: ServerConfig) -> _Transport | None:
    declared: dict[str, _Transport] = {}
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


def _infer_transport(command: str | None, url: str | None) -> _Transport:
    if command:
        return "stdio"
    if url:
        return "sse" if re.split(r"[?#]", url)[0].rstrip("/").endswith("/sse") else "streamable-http"
    raise _Problem('needs "command" (for stdio) or "url" (for sse / streamable-http)')


def _build_server(name: str, raw: msgspec.Raw, environ: _Env, defaults: RestartPolicy) -> ServerSpec:
    if not name:
        raise _Problem("server name must not be empty")
    if len(name) > 64:
        raise _Problem("server name is longer than 64 characters")
    if not name.isprintable():
        raise _Problem("server name must be printable: no newline, tab, escape or other control character")
    entry = _fields(raw, _Problem)
    overrides, rest = _split_policy(entry) if isinstance(entry, dict) else ({}, entry)
    try:
        cfg = msgspec.convert(rest, ServerConfig)
        policy = (
            msgspec.convert(msgspec.to_builtins(defaults) | overrides, RestartPolicy)
            if overrides
            else defaults
        )
    except msgspec.ValidationError as exc:
        raise _Problem(_explain(str(exc))) from None
    _check_numbers(cfg, _Problem)
    _check_numbers(policy, _Problem)
    declared = _declared_transport(cfg)
    if not cfg.tool_timeout > 0:
        raise _Problem(f'"toolTimeout" must be greater than 0 seconds, got {cfg.tool_timeout}')

    def expand(text: str, where: str, tilde: bool = False) -> str:
        if cfg.disabled:  # disabled servers are kept verbatim and never fail on variables
            return text
        try:
            expanded = expand_vars(text, environ)
        except MissingVariable as exc:
            var, hint = exc.name, f"write ${{{exc.name}:-default}} to give a default"
            raise _Problem(f"variable {var} in {where} is not set ({hint})") from None
        return _expand_tilde(expanded, lambda: _home(environ)) if tilde else expanded

    command = None if cfg.command is None else expand(cfg.command, "command", tilde=True)
    args = tuple(expand(arg, f"args[{i}]") for i, arg in enumerate(cfg.args))
    env = {key: expand(value, f"env.{key}") for key, value in cfg.env.items()}
    cwd = None if cfg.cwd is None else expand(cfg.cwd, "cwd", tilde=True)
    url = None if cfg.url is None else expand(cfg.url, "url")
    headers = {key: expand(value, f"headers.{key}") for key, value in cfg.headers.items()}
    transport = declared or _infer_transport(command, url)
    if transport == "stdio" and not command:
        raise _Problem('transport stdio needs a non-empty "command"')
    if transport != "stdio":
        if not url:
            raise _Problem(f'transport {transport} needs a "url"')
        if not cfg.disabled and not _HTTP_URL_RE.match(url):
            raise _Problem('"url" must be an http:// or https:// URL')
    roots = tuple(_root(entry, f"roots[{i}]", expand) for i, entry in enumerate(cfg.roots))
    sampling = cfg.sampling
    if sampling is not None:
        sampling = SamplingHook(
            command=expand(sampling.command, "sampling.command", tilde=True),
            args=[expand(arg, f"sampling.args[{i}]") for i, arg in enumerate(sampling.args)],
            timeout=sampling.timeout,
        )
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
    )


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
