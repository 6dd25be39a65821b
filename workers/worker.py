"""One worker process: owns exactly one MCP session and serves the supervisor's calls.

Above: the supervisor, reached through a DEALER on the worker link (``workers.uplink``:
``supervisor.protocol`` ``WorkerCommand`` in, ``WorkerEvent`` out), and the keeper that started
this process (``python -m workers NAME``, or forked from ``workers.zygote``): stdin is the
lifeline, stderr carries the log. Below: the session's life (``workers.session``): with a stdio
server, the worker's own MCP client over the server's pipes (``workers.lean``, which loads nothing
of the MCP SDK); with a remote one, one ``mcp.Client`` session over its transport.

Life of a worker:

1. read one JSON ``WorkerBoot`` line from stdin (``supervisor.shared.boot``); stdin then stays open as
   the *lifeline*: ``stop`` then end-of-file is an orderly stop (close the session, then the
   server: stdin, SIGTERM, SIGKILL); end-of-file alone means the supervisor died (even by
   kill -9), and the server is SIGKILLed at once;
2. start the server (reporting ``Started`` with its pid), initialize, list every tool (following
   ``nextCursor``; read entry by entry, so one bad tool costs only itself: see
   ``workers.listing``), send ``Ready``; heartbeats are answered from the start (``workers.uplink``);
3. serve ``Invoke`` commands concurrently, each under its own budget: on expiry the caller gets
   ``TIMEOUT`` and the server is sent ``notifications/cancelled``; a call that asks for progress
   gets the server's notifications as ``InvokeProgress`` (``workers.progress`` coalesces them)
   before its answer; serve ``Fetch`` (resources and prompts, see ``workers.catalog``) the same
   way (``workers.calls``); on ``Abort`` (the caller cancelled a call) cancel that call, which
   sends the server ``notifications/cancelled`` and answers nothing; follow the server's tools
   (``workers.tools``); probe the server
   every ``pingInterval``. On a stdio server every request is the worker's own (``workers.lean``:
   the handshake, ``tools/call``, listings, reads, subscriptions), and a tool call's JSON result is
   turned into the wire's ``ToolResult`` without the SDK's models; the SDK's models load only for
   what must be judged as the SDK judges it (the server's own requests, a resource read, a prompt,
   a result that asks for input: ``workers.lean_sdk``). Listings are the worker's own requests on
   every transport (``workers.listing``), and results are checked against the tool's
   ``outputSchema`` by the worker on every transport;
4. exit with a ``WorkerExit`` status: the server exited on its own (``SERVER_DONE`` for status
   0, else ``SERVER_DIED``), start-up failed, the lifeline closed, or the worker failed (an
   exception nothing else caught, ``CRASHED``). Where the status alone does not say why
   (start-up failed, the worker failed), the last word is one ``LAST_WORD`` (CRITICAL) log line
   with the cause, e.g. ``start-up failed: tools/list: ...``: the keeper's ``last_error``.

The worker is a child subreaper: a server's descendant that escapes its process group is
re-parented here and killed with the server.

Log records and the server's stderr go to this process's stderr, one line each, as
``<levelno> <text>`` or ``S <server stderr line>`` (``workers.logs``, in ``supervisor.shared.boot``'s
format); the supervisor's keeper reads them into its own log (``supervisor.daemon.servers.worker_log``).

With ``tracing`` in its boot line, the worker traces its calls (``supervisor.shared.tracing``, configured
here, after the fork) and exports its last spans, bounded, as it exits.

Nothing the supervisor relays ends the worker: a call's arguments are decoded totally
(``workers.values``), and each call is answered on its own.
"""

from __future__ import annotations

import logging
import sys
import traceback

import msgspec
import trio

from supervisor.shared import tracing
from supervisor.shared.boot import LAST_WORD, WorkerExit, decode_worker_boot
from supervisor.shared.processes import become_subreaper, merge_identical_pages
from workers.logs import log_to_stderr, one_line, set_level
from workers.session import Worker, first_leaf
from workers.uplink import Link

__all__ = ["Worker", "main"]

log = logging.getLogger("mcp_supervisor.worker")


def main() -> int:
    log_to_stderr()
    try:
        boot = decode_worker_boot(sys.stdin.buffer.readline())
    except msgspec.DecodeError as exc:
        log.log(LAST_WORD, "start-up failed: bad boot message on stdin: %s", exc)
        return WorkerExit.START_FAILED
    set_level(boot.log_level)
    if boot.tracing:
        _start_tracing(boot.server)
    merged = merge_identical_pages(
        boot.memory_merge
    )  # a forked worker has the zygote's offer: kept or taken back
    log.debug("memory offered to same-page merging: %s", merged or "no")
    become_subreaper()  # daemons that escape the server's process group are re-parented to us
    link = Link.connect(boot)
    try:
        return trio.run(Worker(boot, link).run)
    except KeyboardInterrupt:
        return WorkerExit.LIFELINE
    except Exception as exc:  # boundary: whatever ends the worker, its keeper is told why
        leaf = first_leaf(exc) if isinstance(exc, BaseExceptionGroup) else exc
        log.info("worker failed:\n%s", "".join(traceback.format_exception(exc)).rstrip())
        log.log(LAST_WORD, "worker failed: %s: %s", type(leaf).__name__, one_line(str(leaf)))
        return WorkerExit.CRASHED
    finally:
        link.close()
        tracing.stop(tracing.WORKER_FLUSH_TIMEOUT)


def _start_tracing(server: str) -> None:
    """Trace this worker's calls (here, after the fork: the span processor has a thread of its own)."""
    try:
        tracing.start(tracing.WORKER_SERVICE, server=server)
    except tracing.TracingUnavailable as exc:  # the supervisor started it in the same environment
        log.warning("not tracing: %s", exc)
