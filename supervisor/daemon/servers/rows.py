"""How a server and its workers appear in ``status``: the server's row, and a row per worker.

Above: the servers (``supervisor.daemon.servers.pool`` and its two kinds) and a server's only
keeper, whose ``status`` the supervisor gathers (``GetStatus``, the status page). Below: the keepers,
whose state, pids, restarts and last error each row shows, and the token file of a server that logs
in (when its token expires).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import trio

from supervisor.config.sandbox_entry import describe
from supervisor.protocol import ServerStatus, WorkerStatus
from supervisor.security.tokens import TokenFile

if TYPE_CHECKING:
    from supervisor.daemon.servers.keeper import Keeper
    from supervisor.daemon.servers.pool import Server

__all__ = ["pooled_row", "server_row", "worker_row"]


def server_row(keeper: Keeper, tools: int) -> ServerStatus:
    """The row of a server whose only worker ``keeper`` keeps; ``tools``: how many it registered."""
    spec = keeper.spec
    token = TokenFile(spec.name, spec.url).expires_at() if spec.oauth is not None and spec.url else None
    sandbox = None if spec.sandbox is None else describe(spec.sandbox)
    return ServerStatus(
        server=keeper.name,
        tools=tools,
        transport=spec.transport,
        token_expires_at=token,
        sandbox=sandbox,
        **_fields(keeper),
    )


def worker_row(
    keeper: Keeper, in_flight: int, client: str | None = None, idle: float | None = None
) -> WorkerStatus:
    """A worker's row among its server's workers (a replica, a session)."""
    return WorkerStatus(name=keeper.label, in_flight=in_flight, client=client, idle=idle, **_fields(keeper))


def pooled_row(server: Server, first: Keeper, workers: list[WorkerStatus], **fields: object) -> ServerStatus:
    """The row of a server with several workers: ``first``'s tools, transport and token, with the
    state, restarts and last error of the whole, and a row per worker."""
    return msgspec.structs.replace(
        first.status(),
        state=server.state,
        worker_pid=None,
        server_pid=None,
        restarts=server.restarts,
        last_error=server.last_error,
        workers=workers,
        **fields,
    )


def _fields(keeper: Keeper) -> dict[str, Any]:
    """What both kinds of row say of a worker."""
    return {
        "state": keeper.state,
        "worker_pid": keeper.worker_pid,
        "server_pid": keeper.server_pid,
        "restarts": keeper.tracker.restarts,
        "last_error": keeper.last_error,
        "next_restart_in": max(0.0, keeper.restart_at - trio.current_time()) if keeper.restart_at else None,
    }
