"""The stdio facade's answer to a host's first request, given before the MCP SDK is loaded.

A host that starts ``mcp-supervisor mcp`` waits for the answer to its first request before it sends
anything else: ``initialize`` (the handshake era) or ``server/discover`` (2026-07-28). Loading the
SDK (the pydantic models of every protocol version) takes about 0.45 s, more than the rest of the
start-up together, and hosts give their servers a few seconds at most. So the facade reads that
first line itself, with the standard library only, answers it, and then loads the SDK, which the
host's next requests wait for.

The answer is the one the SDK's server gives: the protocol version negotiated as it negotiates it
(``HANDSHAKE_VERSIONS``, ``MODERN_VERSIONS``: its own lists, which the tests compare), and the
facade's capabilities, server info and instructions. Only a request of the shape hosts send is
answered here: ``initialize`` with a protocol version, capabilities (objects, and the ``listChanged``
of ``roots``) and client info (strings); ``server/discover`` whose ``_meta`` names a 2026-07-28 version,
capabilities and perhaps client info. Anything else (another method, a line that is not JSON, a value
the SDK might refuse) is left to the SDK as it came.

Either way the SDK then reads the line as if it were the first to (``Opening.read``), so its
connection is what it would have been: it answers the request again, and that answer is dropped
(``supervisor.facade.pipes.Answers``, which compares it with the one sent and warns of any
difference).

When the line has not come by the time the facade looks for it, the SDK is loaded in a thread
meanwhile, and once it is, the facade stops waiting and starts as it would without the line.

Above: ``supervisor.cli.facade_commands.cmd_mcp``. Below: nothing but the standard library.
"""

from __future__ import annotations

import json
import logging
import os
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from supervisor import __version__

__all__ = [
    "HANDSHAKE_VERSIONS",
    "INSTRUCTIONS",
    "MODERN_VERSIONS",
    "SERVER_NAME",
    "Answered",
    "Opening",
    "answer",
    "first_answer",
]

log = logging.getLogger("mcp_supervisor.facade")

HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The SDK's ``HANDSHAKE_PROTOCOL_VERSIONS``; an ``initialize`` that asks for another gets the last."""
MODERN_VERSIONS: Final = ("2026-07-28",)
"""The SDK's ``MODERN_PROTOCOL_VERSIONS``: what ``server/discover`` says is supported."""

SERVER_NAME: Final = "mcp-supervisor"  # the server's name and title, as hosts show it
INSTRUCTIONS: Final = (
    "Tools of every MCP server that mcp-supervisor runs, each in its own supervised process, named "
    "mcp_{server}_{tool}. A result with isError whose text starts with UNAVAILABLE, TIMEOUT or "
    "WORKER_CRASHED is about the server, not the arguments: it is being restarted; try again later."
)

MAX_FIRST_LINE: Final = 1024 * 1024  # bytes; a longer first line is left to the SDK (a host's is < 1 KiB)
READ_SIZE: Final = 64 * 1024  # bytes asked of stdin at a time
MAX_DEPTH: Final = 8  # objects nested in a capability: deeper ones are left to the SDK

_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"  # keys of the 2026-07-28 _meta
_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
_CLIENT_INFO_STRINGS: Final = frozenset({"name", "version", "title", "description", "websiteUrl"})


@dataclass(frozen=True, slots=True)
class Answered:
    """A request answered here: its id and method, and the response sent (the whole JSON-RPC message)."""

    id: int | str
    method: str
    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Opening:
    """What the facade read of stdin before the SDK was loaded (the transport reads it first), and
    the request it answered, if it did."""

    read: bytes = b""
    answered: Answered | None = None


# ------------------------------------------------------------------ the answer


def answer(line: bytes) -> Answered | None:
    """The response to ``line`` if it is a request answered here, else None."""
    try:
        message = json.loads(line.decode(), parse_constant=_not_json)  # UTF-8 only, as the transport reads
    except (ValueError, RecursionError):  # UnicodeDecodeError too
        return None
    if not isinstance(message, dict) or message.keys() != {"jsonrpc", "id", "method", "params"}:
        return None
    request_id, method, params = message["id"], message["method"], message["params"]
    if message["jsonrpc"] != "2.0" or not _is_id(request_id) or not isinstance(params, dict):
        return None
    if method == "initialize":
        result = _initialize(params)
    elif method == "server/discover":
        result = _discover(params)
    else:
        return None
    if result is None:
        return None
    return Answered(request_id, method, {"jsonrpc": "2.0", "id": request_id, "result": result})


def _initialize(params: dict[str, Any]) -> dict[str, Any] | None:
    if params.keys() != {"protocolVersion", "capabilities", "clientInfo"}:
        return None
    requested = params["protocolVersion"]
    if not isinstance(requested, str) or not _capabilities(params["capabilities"]):
        return None
    if not _client_info(params["clientInfo"]):
        return None
    return {
        "capabilities": _server_capabilities(),
        "instructions": INSTRUCTIONS,
        "protocolVersion": requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1],
        "serverInfo": _server_info(),
    }


def _discover(params: dict[str, Any]) -> dict[str, Any] | None:
    meta = params.get("_meta")
    if params.keys() != {"_meta"} or not isinstance(meta, dict):
        return None
    if (
        not {_PROTOCOL_VERSION, _CLIENT_CAPABILITIES}
        <= meta.keys()
        <= {
            _PROTOCOL_VERSION,
            _CLIENT_CAPABILITIES,
            _CLIENT_INFO,
        }
    ):
        return None
    if meta[_PROTOCOL_VERSION] not in MODERN_VERSIONS or not _capabilities(meta[_CLIENT_CAPABILITIES]):
        return None
    if _CLIENT_INFO in meta and not _client_info(meta[_CLIENT_INFO]):
        return None
    return {
        "cacheScope": "private",
        "capabilities": _server_capabilities(),
        "instructions": INSTRUCTIONS,
        "resultType": "complete",
        "supportedVersions": list(MODERN_VERSIONS),
        "ttlMs": 0,
        "_meta": {_SERVER_INFO: _server_info()},
    }


def _server_capabilities() -> dict[str, Any]:
    """What the facade's SDK server declares, in either era: its lists change (and hosts hear it),
    resources may be subscribed to, and it serves log levels and completions."""
    return {
        "completions": {},
        "logging": {},
        "prompts": {"listChanged": True},
        "resources": {"listChanged": True, "subscribe": True},
        "tools": {"listChanged": True},
    }


def _server_info() -> dict[str, Any]:
    return {"name": SERVER_NAME, "title": SERVER_NAME, "version": __version__}


def _capabilities(value: object) -> bool:
    """Whether ``value`` is capabilities of the shape hosts declare: objects all the way down, but
    ``roots``, which may say ``listChanged``."""
    return isinstance(value, dict) and all(
        _roots(item) if key == "roots" else _objects(item) for key, item in value.items()
    )


def _roots(value: object) -> bool:
    return (
        isinstance(value, dict)
        and value.keys() <= {"listChanged"}
        and all(isinstance(item, bool) for item in value.values())
    )


def _objects(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is an object of objects of ... (of empty objects), ``MAX_DEPTH`` deep at most."""
    return (
        isinstance(value, dict)
        and depth < MAX_DEPTH
        and all(_objects(item, depth + 1) for item in value.values())
    )


def _client_info(value: object) -> bool:
    return (
        isinstance(value, dict)
        and {"name", "version"} <= value.keys() <= _CLIENT_INFO_STRINGS
        and all(isinstance(item, str) for item in value.values())
    )


def _is_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


# ------------------------------------------------------------------ reading and writing


def first_answer(load: Callable[[], object] | None = None, *, stdin: int = 0, stdout: int = 1) -> Opening:
    """Read the host's first line from ``stdin`` and answer it on ``stdout`` if it is a request
    answered here. If the line has not come yet, ``load`` runs in a thread meanwhile, and once it has
    run, the waiting stops. Returns what was read (the line, and any bytes after it) and what was
    answered."""
    read = bytearray()
    loader: _Loader | None = None
    ready = select.poll()
    ready.register(stdin, select.POLLIN)
    try:
        while b"\n" not in read and len(read) <= MAX_FIRST_LINE:
            events = dict(ready.poll(0 if loader is None and load is not None else None))
            if not events and load is not None:  # the line has not come: load meanwhile
                loader = _Loader(load)
                ready.register(loader.fd, select.POLLIN)
                continue
            if stdin not in events:
                break  # loaded before the line came: wait no longer
            try:
                chunk = os.read(stdin, READ_SIZE)
            except BlockingIOError:  # a non-blocking stdin (shared with another process)
                continue
            if not chunk:
                break  # the host closed stdin
            read += chunk
    except OSError as exc:  # stdin closed or unreadable: the transport meets it, and says so
        log.debug("could not read the host's first line here (%s)", exc)
    line, newline, _ = read.partition(b"\n")
    answered = answer(bytes(line)) if newline else None
    if answered is not None:
        _send(stdout, answered)
    if loader is not None:  # (not on the way out of an exception: Ctrl-C does not wait for it)
        loader.join()
    return Opening(bytes(read), answered)


def _send(stdout: int, answered: Answered) -> None:
    data = (json.dumps(answered.response, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    try:
        _write_all(stdout, data)
    except OSError as exc:  # the host closed its end: the transport finds it gone too
        log.info("could not answer %s: %s", answered.method, exc)
        return
    log.debug("answered %s (id %r) before loading the SDK", answered.method, answered.id)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # a non-blocking stdout (shared with another process): wait for room
            select.select([], [fd], [])


class _Loader:
    """``load`` run in a thread of its own; ``fd`` is readable once it has run. An error is left to
    the main thread, which loads the same modules again and meets it there."""

    def __init__(self, load: Callable[[], object]) -> None:
        self.fd, self._done = os.pipe()
        self._thread = threading.Thread(target=self._run, args=(load,), name="load-sdk", daemon=True)
        self._thread.start()

    def _run(self, load: Callable[[], object]) -> None:
        try:
            load()
        except Exception as exc:
            log.debug("loading in the background failed (%s: %s)", type(exc).__name__, exc)
        finally:
            os.write(self._done, b"\0")

    def join(self) -> None:
        self._thread.join()
        os.close(self.fd)
        os.close(self._done)
