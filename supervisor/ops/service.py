"""The supervisor as a systemd service (``Type=notify``): what it tells the service manager, and when.

Above: ``supervisor.daemon.lifecycle``, which opens a ``Service`` when ``$NOTIFY_SOCKET`` is set, runs it
beside the supervisor, in the supervisor's own trio loop, and says when draining starts
(``stopping``). It hears every event the supervisor publishes (``Supervisor.watch_events``: the
``StateChanged`` ones matter) and every reload (``Supervisor.watch_reloads``). Below: the notifier
(``supervisor.ops.sdnotify``).

- ``READY=1`` once every configured server has had its first chance: each enabled one left
  ``starting`` at least once (``ready``, ``failed``, ``needs-login``, ``stopped``, or
  ``restarting`` after a failed first start). A start that hangs holds it back at most the
  server's ``startTimeout`` (and ``READY_MARGIN``) from the supervisor's start; an empty config is
  ready at once.
- ``WATCHDOG=1`` every half ``$WATCHDOG_USEC`` from a task of the supervisor's loop: a loop that
  wedges stops the pings, and systemd restarts the service.
- ``RELOADING=1`` (with ``MONOTONIC_USEC``) when a reload begins, ``READY=1`` when it is over.
- ``STOPPING=1`` when draining starts (SIGTERM, SIGINT, a ``Shutdown`` request).
- ``STATUS=`` (``3 servers: 2 ready, 1 failed``) with each of those, and when server states
  change, at most once every ``STATUS_INTERVAL``.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Final, Protocol

import trio

from supervisor.config.restart_policy import RestartPolicy
from supervisor.ops.sdnotify import NOTIFY_SOCKET_ENV, SERVICE_ENV, Notifier, watchdog_interval
from supervisor.protocol import STATE_PRECEDENCE, Event, StateChanged, WorkerState

__all__ = ["READY_MARGIN", "STATUS_INTERVAL", "Service", "status_line"]

# Seconds past the longest startTimeout: a first start not judged by then no longer holds READY back.
READY_MARGIN: Final = 5.0
STATUS_INTERVAL: Final = 1.0  # seconds between STATUS updates, at most


log = logging.getLogger("mcp_supervisor")


class _Spec(Protocol):
    @property
    def disabled(self) -> bool: ...

    @property
    def policy(self) -> RestartPolicy: ...


class ServerView(Protocol):
    """What the service reads of a server (``supervisor.daemon.servers.pool.Server``)."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> WorkerState: ...

    @property
    def spec(self) -> _Spec: ...


class Watched(Protocol):
    """What the service needs of the supervisor."""

    @property
    def servers(self) -> Mapping[str, ServerView]: ...

    def watch_events(self, listener: Callable[[Event], None]) -> None: ...

    def watch_reloads(self, watcher: Service) -> None: ...


def status_line(states: Iterable[WorkerState]) -> str:
    """``3 servers: 2 ready, 1 failed`` (states in a fixed order; ``0 servers`` for none)."""
    counts = Counter(states)
    total = sum(counts.values())
    head = f"{total} server{'' if total == 1 else 's'}"
    parts = [f"{counts[state]} {state}" for state in STATE_PRECEDENCE if counts[state]]
    return f"{head}: {', '.join(parts)}" if parts else head


class Service:
    """Tells systemd how the supervisor is; every method is cheap and never raises."""

    def __init__(self, notifier: Notifier, supervisor: Watched, watchdog: float | None) -> None:
        """``watchdog``: seconds between ``WATCHDOG=1`` pings (None: none). Call it before the
        supervisor runs, from its trio loop: the first chances are counted from now."""
        self._notifier = notifier
        self._supervisor = supervisor
        self.watchdog = watchdog
        servers = list(supervisor.servers.values())
        # Servers that have not had their first chance yet: each one left "starting" once.
        self._waiting = {server.name for server in servers if server.state == "starting"}
        timeouts = [server.spec.policy.start_timeout for server in servers if not server.spec.disabled]
        longest = max(timeouts, default=0.0)
        self._ready_by = trio.current_time() + (longest + READY_MARGIN if self._waiting else 0.0)
        self._concluded = trio.Event()  # every server had its first chance
        if not self._waiting:
            self._concluded.set()
        self._changed = trio.Event()  # a state changed since the last STATUS
        self.ready = False  # READY=1 said (the first time)
        self._reloading = False  # RELOADING=1 said, its READY=1 not yet
        self._stopping = False
        supervisor.watch_events(self.event)
        supervisor.watch_reloads(self)

    @classmethod
    def open(
        cls, supervisor: Watched, environ: MutableMapping[str, str] | None = None, pid: int | None = None
    ) -> Service | None:
        """The service ``$NOTIFY_SOCKET`` asks for, or None (not started by systemd, or an address we
        cannot use: said). The variables systemd set for us are taken out of ``environ``
        (``os.environ``), so workers and servers do not inherit them."""
        env = os.environ if environ is None else environ
        if NOTIFY_SOCKET_ENV not in env:
            return None
        notifier = Notifier.from_environ(env)
        watchdog = watchdog_interval(env, pid)
        for name in SERVICE_ENV:
            env.pop(name, None)
        return None if notifier is None else cls(notifier, supervisor, watchdog)

    def status(self) -> str:
        line = status_line(server.state for server in self._supervisor.servers.values())
        return f"stopping; {line}" if self._stopping else line

    # ------------------------------------------------------- the task

    async def run(self) -> None:
        """Ping the watchdog, say READY once every server had its first chance, keep STATUS current;
        until cancelled. A failure here is logged and ends the notifications, not the supervisor."""
        try:
            async with trio.open_nursery() as nursery:
                if self.watchdog is not None:
                    nursery.start_soon(self._ping, self.watchdog)
                nursery.start_soon(self._report)
                with trio.move_on_at(self._ready_by):
                    await self._concluded.wait()
                self._say_ready()
        except Exception:  # boundary: telling systemd must never end the supervisor
            log.exception("notifying systemd failed; no more notifications")
        finally:
            self.close()

    def close(self) -> None:
        """No more notifications (``run`` closes it when it ends)."""
        self._notifier.close()

    async def _ping(self, interval: float) -> None:
        while True:
            self._notifier.send("WATCHDOG=1")
            await trio.sleep(interval)

    async def _report(self) -> None:
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            self._notifier.send(f"STATUS={self.status()}")
            await trio.sleep(STATUS_INTERVAL)

    def _say_ready(self) -> None:
        if self._stopping:
            return
        if self._waiting:
            names = ", ".join(sorted(self._waiting))
            log.warning("telling systemd we are ready while still starting: %s", names)
        self.ready = True
        status = self.status()
        self._notifier.send("READY=1", f"STATUS={status}")
        log.info("told systemd we are ready (%s)", status)

    # ------------------------------------------------ what the supervisor tells

    def event(self, event: Event) -> None:
        """An event the supervisor published: a server's state change counts."""
        if not isinstance(event, StateChanged):
            return
        if event.state != "starting" and event.server in self._waiting:
            self._waiting.discard(event.server)  # its first start concluded, whichever way
            if not self._waiting:
                self._concluded.set()
        self._changed.set()

    def reloading(self) -> None:
        if self.ready and not self._stopping:
            self._reloading = True
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            self._notifier.send("RELOADING=1", f"MONOTONIC_USEC={now}", "STATUS=reloading the config")

    def reloaded(self, rejected: str | None) -> None:
        if self._reloading and not self._stopping:
            self._reloading = False
            status = self.status() if rejected is None else f"reload rejected (see the log); {self.status()}"
            self._notifier.send("READY=1", f"STATUS={status}")

    def stopping(self) -> None:
        """Draining has started: say so once; READY is not said any more."""
        if not self._stopping:
            self._stopping = True
            self._notifier.send("STOPPING=1", f"STATUS={self.status()}")
