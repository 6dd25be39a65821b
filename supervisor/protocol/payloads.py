"""What the front link's replies and the events carry: tools, results, resources, prompts, status."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from supervisor.protocol.codec import StateName

ProgressCallback = Callable[[float, float | None, str | None], object]
"""``fn(progress, total, message)``, for each progress notification of a call: how the client stub
hands them to an agent and how a worker hands its server's on. For ``AsyncSupervisorClient`` it may
also be a coroutine function (it is awaited)."""


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool call's outcome as the worker encodes it and the client decodes it.

    ``content`` keeps every MCP content item as the server sent it (text, image,
    audio, resource_link, resource), in its JSON shape.
    """

    content: list[dict[str, Any]] = []
    structured_content: Any = None
    is_error: bool = False
    text: str = ""


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A registry entry as agents see it."""

    name: str
    server: str
    original_name: str
    description: str = ""
    input_schema: dict[str, Any] = {}
    title: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None


class WorkerTool(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool as the MCP server listed it, before prefixing."""

    name: str
    description: str = ""
    input_schema: Any = None
    title: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None


class ResourceInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A resource as its server listed it; resources are addressed by ``server`` and ``uri``."""

    server: str
    uri: str
    name: str = ""
    title: str | None = None
    description: str = ""
    mime_type: str | None = None
    size: int | None = None
    annotations: dict[str, Any] | None = None


class ResourceTemplateInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A resource template (an RFC 6570 ``uri_template``) as its server listed it."""

    server: str
    uri_template: str
    name: str = ""
    title: str | None = None
    description: str = ""
    mime_type: str | None = None
    annotations: dict[str, Any] | None = None


class PromptInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A prompt under its prefixed name (``mcp_{server}_{prompt}``, as tools are named).

    ``arguments`` are the server's ``PromptArgument`` objects in their JSON shape
    (``name``, ``description``, ``required``, ``title``); their values are strings.
    """

    name: str
    server: str
    original_name: str
    title: str | None = None
    description: str = ""
    arguments: list[dict[str, Any]] = []


class ResourceResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What ``resources/read`` returned: every item of ``contents`` in its JSON shape
    (``uri``, ``mimeType``, and ``text`` or base64 ``blob``); ``text`` joins the text items
    (a blob shows as a ``[blob ...]`` line)."""

    contents: list[dict[str, Any]] = []
    text: str = ""


class PromptResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What ``prompts/get`` returned: ``messages`` (``role`` and ``content``) in their JSON shape;
    ``text`` renders them as ``role: text`` lines."""

    description: str = ""
    messages: list[dict[str, Any]] = []
    text: str = ""


class Completion(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What ``completion/complete`` returned: at most 100 ``values``; ``total`` and ``has_more`` as
    the server said them."""

    values: list[str] = []
    total: int | None = None
    has_more: bool | None = None


class ServerFailure(msgspec.Struct, frozen=True, kw_only=True):
    """A server left out of an aggregated listing, and why (an error code and message)."""

    server: str
    code: str
    message: str


class WorkerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One worker of a server that has several: a replica (``replicas``) or a client's session
    (``scope: client``), in ``ServerStatus.workers``."""

    name: str  # "files#2" for a replica, "files@CLIENT" for a session
    state: StateName
    worker_pid: int | None = None
    server_pid: int | None = None
    restarts: int = 0
    last_error: str | None = None
    next_restart_in: float | None = None
    in_flight: int = 0  # requests sent to it and not answered yet
    client: str | None = None  # a session's client identity
    idle: float | None = None  # a session: seconds since its client last sent it a request


class ServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``status``. A server with several workers (replicas, per-client sessions) has the
    state of the whole (``ready`` while any replica is), and one ``workers`` entry per worker."""

    server: str
    state: StateName
    worker_pid: int | None = None
    server_pid: int | None = None
    restarts: int = 0
    tools: int = 0
    last_error: str | None = None
    transport: str = "stdio"
    next_restart_in: float | None = None
    # OAuth servers: when the access token kept for it expires (seconds since the epoch), if it says.
    token_expires_at: float | None = None
    scope: str = "shared"  # "client": a worker per client, started on its first request
    workers: list[WorkerStatus] = []  # replicas or sessions; empty for a server with one worker
    sandbox: str | None = None  # how it is confined (``supervisor.config.sandbox_entry.describe``); None: not


class AuditStats(msgspec.Struct, kw_only=True):
    """The audit trail's figures since the supervisor started (``supervisor.daemon.audit``)."""

    path: str = ""  # the trail's file; "" when the trail is off
    lines: int = 0  # lines written to the file
    failures: int = 0  # writes that failed (their lines kept and written again later)
    dropped: int = 0  # lines lost: the buffer of lines waiting to be written was full
    waiting: int = 0  # lines not written yet


class FrontStats(msgspec.Struct, kw_only=True):
    """The front door's figures, in ``status``: requests in flight now, and what was refused or dropped
    since the supervisor started (see the README's Reliability section); and the audit trail's, which
    records the front door's calls, reads and prompts."""

    clients: int = 0  # clients with requests in flight
    in_flight: int = 0  # their requests in flight (calls, resources and prompts requests)
    overloaded: int = 0  # requests answered OVERLOADED (maxCallsPerClient, maxCallsInFlight)
    malformed: int = 0  # front messages that were not requests (answered BAD_REQUEST, or dropped)
    dropped_replies: int = 0  # replies to clients that do not read theirs (maxQueuedReplies)
    dropped_calls: int = 0  # requests in flight of those clients, forgotten with them
    audit: AuditStats | None = None  # None from a supervisor older than the trail


class ReloadSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What a reload did: server names by outcome, and the top-level settings that changed (applied)."""

    config: str = ""  # the file that was read
    added: list[str] = []  # started
    removed: list[str] = []  # stopped and forgotten
    changed: list[str] = []  # restarted with their new spec (stopped if now disabled)
    unchanged: list[str] = []  # not touched
    settings: list[str] = []  # "supervisor" keys whose value changed, as spelled in the file
