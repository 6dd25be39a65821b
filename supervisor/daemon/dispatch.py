"""The supervisor's dispatch table: each front request handed to the part that owns it.

Above: the front door (``supervisor.daemon.front_door``), which hands over every request it decoded.
Below: the owners: the router (tool calls, a caller's answers and cancels), the fetches (resources,
prompts, completions), the first starts (``ListTools``), the crew (``restart``, ``stop``,
``start``), the interests (log levels and subscriptions), the log book (``GetLogs``), and the
supervisor itself (``status``, ``reload``, ``shutdown``), and the audit trail (``GetAudit``, answered
once its files are read). A request its owner answers at once is
answered here; the others are answered by their owners later. ``Answer`` and ``Cancel`` get no reply
of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import assert_never

import trio

from supervisor.daemon.audit.trail import Trail
from supervisor.daemon.fetches import Fetches
from supervisor.daemon.first_starts import FirstStarts
from supervisor.daemon.router import Router
from supervisor.daemon.servers.crew import Crew
from supervisor.daemon.servers.pool import Server
from supervisor.daemon.servers.worker_log import LogBook
from supervisor.daemon.wishes import Interests
from supervisor.protocol import (
    Answer,
    CallTool,
    Cancel,
    Complete,
    Done,
    FrontReply,
    FrontRequest,
    GetAudit,
    GetLogs,
    GetPrompt,
    GetStatus,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ListTools,
    Ping,
    ReadResource,
    Reload,
    Restart,
    SetLogLevel,
    Shutdown,
    Start,
    StatusReply,
    Stop,
    Subscribe,
    Unsubscribe,
)

__all__ = ["Dispatch"]


class Dispatch:
    """Which part answers which front request."""

    def __init__(
        self,
        *,
        router: Router,
        fetches: Fetches,
        first_starts: FirstStarts,
        crew: Crew,
        interests: Interests,
        logs: LogBook,
        audit: Trail,
        servers: Mapping[str, Server],
        reply: Callable[[bytes, FrontReply], None],
        status: Callable[[int], StatusReply],
        reload: Callable[[bytes, int], None],
        shutdown: Callable[[Shutdown], Done],
        settled: Callable[[], None],
        tasks: Callable[[], trio.Nursery | None],
    ) -> None:
        """``status``, ``reload`` and ``shutdown``: the supervisor's own answers; ``settled`` hears
        that a call was answered (cancelled); ``tasks``: where a ``ListTools`` that waits runs, and
        a ``GetAudit``."""
        self._router = router
        self._fetches = fetches
        self._first_starts = first_starts
        self._crew = crew
        self._interests = interests
        self._logs = logs
        self._audit = audit
        self._servers = servers
        self._reply = reply
        self._status = status
        self._reload = reload
        self._shutdown = shutdown
        self._settled = settled
        self._tasks = tasks

    def handle(self, caller: bytes, request: FrontRequest) -> None:
        match request:
            case CallTool():
                self._router.call(caller, request)
            case ListTools():
                self._first_starts.list_tools(caller, request, self._tasks())
            case GetStatus(id=id):
                self._reply(caller, self._status(id))
            case Restart() | Stop() | Start():
                self._reply(caller, self._crew.operate(request))
            case Ping(id=id):
                self._reply(caller, Done(id=id))
            case ListResources() | ListResourceTemplates() | ListPrompts():
                self._fetches.list(caller, request)
            case ReadResource():
                self._fetches.read(caller, request)
            case GetPrompt():
                self._fetches.get_prompt(caller, request)
            case Complete():
                self._fetches.complete(caller, request)
            case SetLogLevel():
                self._reply(caller, self._interests.set_level(caller, request))
            case Subscribe():
                self._reply(caller, self._interests.subscribe(caller, request))
            case Unsubscribe():
                self._reply(caller, self._interests.unsubscribe(caller, request))
            case Reload(id=id):
                self._reload(caller, id)
            case Answer():  # no reply of its own: its worker gets it, if the call is still in flight
                self._router.answer(caller, request)
            case Cancel():  # no reply of its own: the cancelled request is answered CANCELLED
                self._router.cancel(caller, request)
                self._settled()
            case GetLogs():
                self._reply(caller, self._logs.answer(request, self._servers))
            case Shutdown():
                self._reply(caller, self._shutdown(request))
            case GetAudit():
                tasks = self._tasks()
                assert tasks is not None  # requests are read only while the supervisor runs
                self._audit.answer(caller, request, tasks)
            case _:
                assert_never(request)
