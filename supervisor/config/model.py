"""The config's data model: a server entry as written in the file, the supervisor's settings, a
server as validated and expanded (``ServerSpec``), and a loaded file (``Config``) with its problems.

Above: ``supervisor.config.load``, which finds, reads and parses the file into these (its messages
phrased by ``supervisor.config.json_input``); the keepers and the supervisor, which run what they say;
and the workers, which get their server's ``ServerSpec`` in the boot line (``supervisor.shared.boot``).
Below: ``supervisor.config.restart_policy`` (each server's restart policy) and msgspec. The file's structs
forbid unknown fields, so a typo is a problem that names the field.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from supervisor.config.audit_entry import AuditConfig
from supervisor.config.restart_policy import RestartPolicy
from supervisor.config.sandbox_entry import SandboxConfig, SandboxSpec

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_REDIRECT_URI",
    "DEFAULT_STATUS_BUCKET",
    "DEFAULT_TOOL_TIMEOUT",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "MissingVariable",
]
__all__ += [
    "OAuthConfig",
    "OAuthGrant",
    "OAuthSpec",
    "RootEntry",
    "SamplingHook",
    "ServerConfig",
    "ServerSpec",
]
__all__ += [
    "MAX_REPLICAS",
    "MAX_SESSIONS",
    "MAX_STATUS_BUCKET",
    "Scope",
    "SupervisorSettings",
    "TokenAuthMethod",
    "Transport",
]

DEFAULT_TOOL_TIMEOUT = 30.0
"""Seconds a tool call may run when neither the caller nor the config says otherwise."""

Transport = Literal["stdio", "sse", "streamable-http"]
Scope = Literal["shared", "client"]
"""``shared``: one set of workers serves every client; ``client``: each client gets a worker of its own."""

MAX_REPLICAS = 64
MAX_SESSIONS = 1024
DEFAULT_IDLE_TIMEOUT = 300.0
"""Seconds a ``scope: client`` session may go without a call before it is reaped."""
DEFAULT_MAX_SESSIONS = 16
"""``scope: client`` sessions of one server at once; a new client past it is answered OVERLOADED."""
DEFAULT_STATUS_BUCKET = 60
"""Seconds per point of the console's charts (``statusBucket``): with 60 points, the last hour."""
MAX_STATUS_BUCKET = 3600


class RootEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One root a server is told about on ``roots/list``: a ``file://`` URI (or an absolute path)."""

    uri: str
    name: str | None = None


class SamplingHook(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A program that answers a server's ``sampling/createMessage``: request params in, result out (JSON)."""

    command: str
    args: list[str] = []
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 60.0  # seconds; then the request is refused


OAuthGrant = Literal["authorization_code", "client_credentials", "identity_assertion"]
TokenAuthMethod = Literal["client_secret_basic", "client_secret_post", "none", "private_key_jwt"]

DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"
"""Where ``mcp-supervisor login`` listens for the authorization server's redirect (a fixed port, so that
a client registered once keeps working); ``"redirectUri"`` in a server's ``"oauth"`` changes it."""


class OAuthConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """A remote server's ``"oauth"`` object, as written (``${VAR}`` not yet expanded).

    ``authorization_code`` (the default) is authorized once by ``mcp-supervisor login``; the other
    grants need nobody: ``client_credentials`` with a secret or a private key (``private_key_jwt``),
    ``identity_assertion`` (SEP-990: an enterprise IdP's ID token exchanged for an ID-JAG, then for an
    access token at ``issuer``).
    """

    grant: OAuthGrant = "authorization_code"
    client_id: str | None = None  # pre-registered; absent: a Client ID Metadata Document or registration
    client_secret: str | None = None
    token_endpoint_auth_method: TokenAuthMethod | None = None
    private_key: str | None = None  # PEM, for private_key_jwt (usually "${VAR}")
    signing_algorithm: str = "RS256"
    scope: str | None = None  # absent: chosen from the server's challenge and metadata
    client_metadata_url: str | None = None  # an https URL used as client_id where the server supports it
    client_name: str = "mcp-supervisor"
    redirect_uri: str = DEFAULT_REDIRECT_URI
    issuer: str | None = None  # the authorization server's issuer (required for identity_assertion)
    idp_token_endpoint: str | None = None  # identity_assertion: the enterprise IdP's token endpoint
    idp_client_id: str | None = None
    idp_id_token: str | None = None  # the user's ID token at the IdP (usually "${VAR}")


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """One entry of ``mcpServers`` exactly as written in the file."""

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    env_file: str | None = None  # a dotenv file of more env (VS Code's envFile); env wins
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    oauth: OAuthConfig | bool | None = None  # OAuth 2.1 for a remote server; true: every default
    type: str | None = None
    transport: str | None = None
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT  # "toolTimeout" in the file; must be > 0
    # Calls in flight to tools annotated readOnlyHint or idempotentHint, when their server dies, are
    # run once more on the new one (within their deadline) instead of failing WORKER_CRASHED.
    retry_idempotent: bool = False
    disabled: bool = False
    roots: list[str | RootEntry] = []  # answered on roots/list; none: roots are not offered
    elicitation: Literal["decline", "defaults"] = "decline"
    # A program that answers, or "caller": the calling agent's handler answers (refused without one).
    # Absent: sampling is not offered, and refused.
    sampling: SamplingHook | Literal["caller"] | None = None
    refresh_interval: Annotated[float, msgspec.Meta(gt=0)] | None = None  # seconds between tool re-lists
    # Tool views (``supervisor.config.tool_filters``): names or fnmatch globs of the server's own tool
    # names. With
    # "enabledTools", only the tools matching one of them are registered (an empty list: none); then
    # those matching a "disabledTools" pattern are left out. Absent "enabledTools": every tool.
    enabled_tools: list[str] | None = None
    disabled_tools: list[str] = []
    # Several workers for one server (``supervisor.daemon.servers.pool``): N replicas behind one set of
    # tool names, or
    # one worker per client (``scope: client``), started on its first call and reaped when idle.
    replicas: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICAS)] = 1
    scope: Scope = "shared"
    idle_timeout: Annotated[float, msgspec.Meta(gt=0)] | None = None  # scope client; default 300 s
    max_sessions: Annotated[int, msgspec.Meta(ge=1, le=MAX_SESSIONS)] | None = None  # scope client; 16
    # What the server may see, reach and use (``supervisor.config.sandbox_entry``); over the default's.
    sandbox: SandboxConfig | bool | None = None
    # The audit trail records the decoded arguments of this server's calls and prompts (else only
    # their size and digest).
    audit_arguments: bool = False


class SupervisorSettings(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    """Supervisor-wide settings: the top-level ``"supervisor"`` object, less the policy defaults in it."""

    shutdown_grace: Annotated[float, msgspec.Meta(ge=0)] = 5.0  # seconds in-flight calls get on shutdown
    heartbeat_interval: Annotated[float, msgspec.Meta(gt=0)] = 1.0  # seconds between worker heartbeats
    heartbeat_timeout: Annotated[float, msgspec.Meta(gt=0)] = 3.0  # silence after which a worker is dead
    worker_spawn: Literal["zygote", "exec"] = "zygote"  # fork workers from a pre-imported process, or exec
    # Offer workers' memory to the kernel's same-page merging (KSM), where the host runs it: workers
    # write the same bytes to the same pages, and KSM folds those back into one. Read when a worker starts.
    memory_merge: bool = True
    # Calls (and resources and prompts requests) in flight: one client's, and everyone's; past either,
    # a new one is answered OVERLOADED at once.
    max_calls_per_client: Annotated[int, msgspec.Meta(gt=0)] = 1000
    max_calls_in_flight: Annotated[int, msgspec.Meta(gt=0)] = 10_000
    # Replies queued for one client that does not read them; past it, replies to it are dropped (and its
    # calls in flight with them). Read when the supervisor starts.
    max_queued_replies: Annotated[int, msgspec.Meta(gt=0, le=2**31 - 1)] = 1000  # a ZeroMQ HWM is a C int
    # The HTTP listener for Prometheus metrics and the status page, "HOST:PORT" (None: no listener).
    # Read when the supervisor starts.
    metrics: str | None = None
    # Whether the status page offers restart, stop and start buttons (POSTs to the listener).
    status_controls: bool = False
    # More Host names the HTTP listener answers to (its address and, on loopback, the loopback names
    # always): a DNS name of your own, a reverse proxy's. Any other Host is refused (DNS rebinding).
    status_hosts: list[str] = []
    # Seconds per point of the console's charts, which hold 60 points: the default, a minute each,
    # shows the last hour. Read when the supervisor starts.
    status_bucket: Annotated[int, msgspec.Meta(ge=1, le=MAX_STATUS_BUCKET)] = DEFAULT_STATUS_BUCKET
    # OpenTelemetry spans for routed calls in the supervisor and its workers, exported as the standard
    # OTEL_* environment variables say. Read when the supervisor starts.
    tracing: bool = False
    # The ``sandbox`` of every stdio server that does not say otherwise (``supervisor.config.sandbox_entry``).
    sandbox: SandboxConfig | bool | None = None
    # The audit trail (``supervisor.config.audit_entry``); false turns it off. Read when the supervisor
    # starts.
    audit: AuditConfig | bool | None = None


@dataclass(frozen=True)
class OAuthSpec:
    """A server's OAuth settings, validated and expanded (secrets left out of repr)."""

    grant: OAuthGrant = "authorization_code"
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    token_endpoint_auth_method: TokenAuthMethod | None = None
    private_key: str | None = field(default=None, repr=False)
    signing_algorithm: str = "RS256"
    scope: str | None = None
    client_metadata_url: str | None = None
    client_name: str = "mcp-supervisor"
    redirect_uri: str = DEFAULT_REDIRECT_URI
    issuer: str | None = None
    idp_token_endpoint: str | None = None
    idp_client_id: str | None = None
    idp_id_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ServerSpec:
    """A validated, expanded server, ready to start (``env``/``headers`` are left out of repr)."""

    name: str
    transport: Transport
    command: str | None
    args: tuple[str, ...]
    env: dict[str, str] = field(repr=False)
    cwd: str | None
    url: str | None
    headers: dict[str, str] = field(repr=False)
    tool_timeout: float
    disabled: bool
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    retry_idempotent: bool = False  # see ServerConfig
    roots: tuple[RootEntry, ...] = ()
    elicitation: Literal["decline", "defaults"] = "decline"
    sampling: SamplingHook | None = None
    refresh_interval: float | None = None  # re-list the tools this often, for servers that never notify
    # The tool view (``supervisor.config.tool_filters.tool_allowed``): None registers every tool, () none;
    # then
    # ``disabled_tools`` patterns are left out.
    enabled_tools: tuple[str, ...] | None = None
    disabled_tools: tuple[str, ...] = ()
    oauth: OAuthSpec | None = None  # remote servers only: OAuth 2.1 (``workers.oauth``)
    sampling_caller: bool = False  # sampling is offered, and answered by the calling client's handler
    replicas: int = 1
    scope: Scope = "shared"
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT  # scope client: seconds without a call, then reaped
    max_sessions: int = DEFAULT_MAX_SESSIONS  # scope client: sessions at once
    sandbox: SandboxSpec | None = None  # stdio servers: confined so (``workers.sandbox``); None: not
    # Read by the audit trail from the config in force: a change is applied without a restart.
    audit_arguments: bool = field(default=False, compare=False)


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
