"""The HTTP listener of one supervisor: bound before it starts, then served as a task of its loop.

Above: the daemon (``supervisor.daemon.lifecycle``), which binds a ``Site`` for ``run --metrics`` or the
``"metrics"`` setting (a port in use is a start error), gives its ``meter`` to the ``Supervisor``'s
call table, and starts ``serve`` in its nursery before the supervisor's own tasks. Below: the
``Supervisor`` (its status rows, registry, call table, crew and published events), the metrics
(``supervisor.ops.metrics``: the meter, and the collector in a ``CollectorRegistry`` of this site's own),
and the listener's parts (``supervisor.ops.web``: the server, the paths, the live feed).

The live feed gets every ``StateChanged`` and ``RegistryChanged`` as the supervisor publishes it,
each timeline entry as it is made (``timeline``), and every ``STATS_INTERVAL`` the whole status (the
rows, with each server's calls per second, p50 and p99 over the last minute), while anyone listens.
The timeline (``supervisor.ops.web.timeline``) is kept whether anyone listens or not, from the same
events and from the end of every reload.

The audit views read the supervisor's audit trail through its ``audit`` attribute (``query`` and
``identities``), when it has one; without, they answer None (the paths: 404 "no audit trail").
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any, Final

import msgspec
import trio
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from supervisor.daemon.core import Supervisor
from supervisor.ops.metrics.collector import Sample, ServerSample, SupervisorCollector
from supervisor.ops.metrics.history import BUCKET
from supervisor.ops.metrics.meter import CallMeter
from supervisor.ops.web.app import Action, App
from supervisor.ops.web.detail import LOG_LINES, detail
from supervisor.ops.web.feed import Feed, Subscription
from supervisor.ops.web.http import HttpServer
from supervisor.ops.web.timeline import Entry, Timeline
from supervisor.protocol import (
    Done,
    ErrorReply,
    Event,
    GetLogs,
    LogLines,
    RegistryChanged,
    Restart,
    Start,
    StateChanged,
    Stop,
)
from supervisor.shared.address import HostCheck, ListenAddress

__all__ = ["STATS_INTERVAL", "Site"]

log = logging.getLogger("mcp_supervisor")

STATS_INTERVAL: Final = 1.0  # seconds between stats events on the live feed
LISTEN_BACKLOG: Final = 128  # connections the kernel holds before they are accepted
_OPERATIONS: Final[dict[Action, type[Restart | Stop | Start]]] = {
    "restart": Restart,
    "stop": Stop,
    "start": Start,
}


class Site:
    """A bound listener and the call meter; ``serve`` runs it for a supervisor."""

    def __init__(self, address: ListenAddress, sock: socket.socket, bucket: int = BUCKET) -> None:
        """``bucket``: seconds per point of the console's charts (``statusBucket``)."""
        self.address = address
        self._socket = sock
        self.port: int = sock.getsockname()[1]
        self.url = address.url(self.port)
        self.meter = CallMeter(trio.current_time, bucket=bucket)

    @classmethod
    def bind(cls, address: ListenAddress, bucket: int = BUCKET) -> Site:
        """Listen on ``address`` now (raises ``OSError``: a name that does not resolve, a port in use),
        with ``bucket`` seconds per point of the charts."""
        family, kind, proto, _, where = socket.getaddrinfo(
            address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(where)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return cls(address, sock, bucket)

    async def serve(
        self, supervisor: Supervisor, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve the page, the metrics and the controls of ``supervisor`` until cancelled."""
        backend = _Backend(
            supervisor,
            self.meter,
            HostCheck(self.address, self.port, supervisor.config.settings.status_hosts),
        )
        supervisor.watch_events(backend.event)
        supervisor.watch_reloads(backend)
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(self._socket))
        async with trio.open_nursery() as nursery:
            await nursery.start(HttpServer(App(backend).handle).serve, listener)
            nursery.start_soon(backend.tick)
            task_status.started()


class _Backend:
    """What the paths read and do, from a running supervisor (``supervisor.ops.web.app.Backend``)."""

    def __init__(self, supervisor: Supervisor, meter: CallMeter, hosts: HostCheck) -> None:
        self._supervisor = supervisor
        self._meter = meter
        self.hosts = hosts
        self.feed = Feed()
        self._timeline = Timeline()
        self._registry = CollectorRegistry()
        self._registry.register(SupervisorCollector(self.sample, meter))

    def sample(self) -> Sample:
        sup = self._supervisor
        reply = sup.status()
        assert reply.front is not None
        in_flight = sup.calls.tool_calls_by_server()
        rows = []
        for row in reply.servers:
            server = sup.servers.get(row.server)
            pids = () if server is None else tuple(sorted(server.worker_pids()))
            calls = in_flight.get(row.server, 0)
            rows.append(ServerSample(row.server, row.state, row.restarts, row.tools, calls, pids))
        registry = sup.registry
        return Sample(rows, reply.front, sup.received, len(registry.tools()), registry.version)

    def status(self) -> bytes:
        return msgspec.json.encode(self._status())

    def _status(self) -> dict[str, Any]:
        sup = self._supervisor
        reply = sup.status()
        self._meter.keep(sup.servers)
        calls = {}
        for name in sup.servers:
            per_second, p50, p99 = self._meter.recent(name)
            calls[name] = {"per_second": round(per_second, 3), "p50": p50, "p99": p99}
        return {
            "servers": reply.servers,
            "calls": calls,
            "front": reply.front,
            "registry": {"tools": len(sup.registry.tools()), "version": sup.registry.version},
            "controls": self.controls(),
        }

    def unready(self) -> dict[str, Any] | None:
        sup = self._supervisor
        if sup.phase != "serving":
            why = "draining: stopping" if sup.phase == "draining" else "the front door is not served yet"
            return {"ready": False, "reason": why}
        starting = sup.first_starts.pending()
        if starting:
            return {"ready": False, "reason": "servers starting", "starting": starting}
        return None

    def metrics(self, accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(self._registry), content_type

    def controls(self) -> bool:
        return self._supervisor.config.settings.status_controls

    def operate(self, action: Action, server: str) -> str | None:
        reply = self._supervisor.crew.operate(_OPERATIONS[action](id=0, server=server))
        if isinstance(reply, Done):
            return None
        return reply.message if isinstance(reply, ErrorReply) else f"unexpected answer {type(reply).__name__}"

    def subscribe(self) -> Subscription | None:
        return self.feed.subscribe()

    def history(self) -> bytes:
        servers = self._supervisor.servers
        self._meter.keep(servers)
        return msgspec.json.encode(self._meter.history(servers))

    def timeline(self) -> bytes:
        return msgspec.json.encode({"events": self._timeline.newest()})

    def server(self, name: str) -> bytes | str:
        sup = self._supervisor
        server = sup.servers.get(name)
        logs = sup.logs.answer(GetLogs(id=0, server=name, limit=LOG_LINES), sup.servers)
        if server is None or not isinstance(logs, LogLines):
            known = ", ".join(sup.servers) or "none"
            return f"no server named {name!r} (servers: {known})"
        tools = [tool for tool in sup.registry.tools() if tool.server == name]
        return msgspec.json.encode(detail(server.status(), tools, logs.log.lines))

    async def audit(
        self, since: float | None, identity: str | None, tool: str | None, limit: int
    ) -> dict[str, Any] | None:
        trail = self._trail()
        if trail is None:
            return None
        after = None if since is None else time.time() - since
        stats = trail.stats()
        answer: dict[str, Any] = {
            "records": [],
            "path": stats.path,
            "lines": stats.lines,
            "failures": stats.failures,
            "dropped": stats.dropped,
        }
        try:
            answer["records"] = await trail.query(since=after, identity=identity, tool=tool, limit=limit)
        except OSError as exc:
            answer["error"] = f"cannot read the audit trail: {exc.strerror or exc}"
        return answer

    def identities(self) -> dict[str, Any] | None:
        trail = self._trail()
        return None if trail is None else {"identities": trail.identities()}

    def _trail(self) -> Any:
        """The supervisor's audit trail, None when it has none or it is off (``"audit": false``)."""
        trail = getattr(self._supervisor, "audit", None)
        return None if trail is None or getattr(trail, "spec", None) is None else trail

    def reloading(self) -> None:
        """A reload begins (``ReloadWatcher``): its end goes on the timeline."""

    def reloaded(self, rejected: str | None) -> None:
        self._note(self._timeline.reloaded(rejected))

    def _note(self, entry: Entry) -> None:
        if len(self.feed):
            self.feed.publish("timeline", msgspec.json.encode(entry))

    def event(self, event: Event) -> None:
        """A published event, for the timeline and the live feed (called by the publisher: never
        blocks or raises)."""
        try:
            if isinstance(event, StateChanged):
                self._note(self._timeline.state_changed(event))
            if not len(self.feed):
                return
            match event:
                case StateChanged():
                    self.feed.publish("state", msgspec.json.encode(event))
                case RegistryChanged(server=server, version=version):
                    tools = self._supervisor.registry.count(server)
                    change = {"server": server, "version": version, "tools": tools}
                    self.feed.publish("registry", msgspec.json.encode(change))
                case _:
                    pass  # the version beacon: the stats events say the version too
        except Exception:  # boundary: the live feed must never break the supervisor's publishing
            log.exception("status page: publishing %s failed", type(event).__name__)

    async def tick(self) -> None:
        """The whole status every ``STATS_INTERVAL``, while anyone listens."""
        while True:
            await trio.sleep(STATS_INTERVAL)
            if len(self.feed):
                self.feed.publish("stats", self.status())
