"""The daemon's life: claiming the endpoint, binding, serving until a signal, draining, stopping.

Above: ``mcp-supervisor run`` (``supervisor.cli.main``), which parses its arguments, sets up logging and
turns a ``StartError`` into its exit code. Below: the ``Supervisor`` (``supervisor.daemon.core``), and its
HTTP listener for metrics and the status page (``supervisor.ops.web.site``), bound before anything starts
(a port in use is a ``StartError``) and served first.

Signals: SIGINT and SIGTERM drain the calls in flight (up to ``shutdownGrace``; a second signal cuts
that short) and stop; SIGHUP reloads the config file. An ipc endpoint must be in a private directory;
one whose socket file is left by a supervisor that was killed is taken over, one where a supervisor
answers is refused. A tcp endpoint needs CURVE keys unless ``insecure`` (said loudly).
A front ``Shutdown`` request (``mcp-supervisor shutdown``) stops it as SIGTERM does, with its grace.
With ``tracing`` (``--tracing``, or the ``"tracing"`` setting), spans are exported from the start
(``supervisor.shared.tracing``; a missing SDK is a ``StartError``) and flushed, bounded, at the end.
Started by systemd (``$NOTIFY_SOCKET``), it tells the service manager how it is (``supervisor.ops.service``).
The audit trail's file is named after the endpoint (``supervisor.config.audit_entry.instance_name``).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import trio
import zmq

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorError
from supervisor.config.audit_entry import audit_spec, instance_name
from supervisor.config.load import ConfigError, load_config
from supervisor.daemon.core import Supervisor
from supervisor.ops.service import Service
from supervisor.security.curve import AllowedClients
from supervisor.security.keys import KeyFileError, ServerKeys, key_dir, needs_curve
from supervisor.shared.address import parse_address
from supervisor.shared.paths import (
    claim_ipc_dir,
    default_endpoint,
    ensure_runtime_dir,
    ipc_path,
    resolve_endpoint,
    runtime_dir,
)
from supervisor.shared.processes import ksm_running
from supervisor.shared.tracing import SUPERVISOR_FLUSH_TIMEOUT, SUPERVISOR_SERVICE, TracingUnavailable
from supervisor.shared.tracing import start as tracing_start
from supervisor.shared.tracing import stop as tracing_stop

if TYPE_CHECKING:
    from supervisor.ops.web.site import Site

__all__ = ["StartError", "run"]

log = logging.getLogger("mcp_supervisor")


class StartError(Exception):
    """The supervisor cannot start; ``usage``: because of what it was given (config, endpoint, keys)."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def run(
    config_path: str | Path | None,
    endpoint: str | None,
    *,
    keys: str | None,
    insecure: bool,
    metrics: str | None = None,
    tracing: bool = False,
) -> None:
    """Run a supervisor for ``config_path`` on ``endpoint`` until SIGINT or SIGTERM; ``metrics``
    (``HOST:PORT``, else the config's ``"metrics"``): where its HTTP listener listens; ``tracing``:
    trace calls (as the config's ``"tracing"`` does)."""
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise StartError(str(exc), usage=True) from exc
    for problem in config.problems:
        log.error("config %s: %s (skipped)", config.path, problem.message)
    if tracing or config.settings.tracing:
        _start_tracing()
    if config.settings.memory_merge:
        _say_memory_merge()
    endpoint = resolve_endpoint(endpoint)
    curve = _front_door(endpoint, keys, insecure)
    _claim_endpoint(endpoint)
    site = _site(metrics, config.settings.metrics, config.settings.status_bucket)
    workers = ensure_runtime_dir(runtime_dir()) / f"workers-{os.getpid()}.sock"
    meter = None if site is None else site.meter
    audit = audit_spec(config.settings.audit, instance_name(endpoint, runtime_dir()))
    if audit is not None:
        log.info("audit trail: %s (rotated at %d bytes, %d kept)", audit.path, audit.max_bytes, audit.keep)
    supervisor = Supervisor(
        config, endpoint=endpoint, worker_endpoint=f"ipc://{workers}", curve=curve, meter=meter, audit=audit
    )
    try:
        supervisor.bind()
    except (zmq.ZMQError, OSError) as exc:
        raise StartError(f"cannot listen on {endpoint}: {exc}") from exc
    try:
        trio.run(_serve, supervisor, site)
    finally:
        tracing_stop(SUPERVISOR_FLUSH_TIMEOUT)  # bounded: a collector that is down costs that, no more


def _front_door(endpoint: str, keys: str | None, insecure: bool) -> ServerKeys | None:
    """The CURVE keys for a network endpoint (None for ipc, or with ``--insecure``, said loudly)."""
    if not needs_curve(endpoint):
        return None
    if insecure:
        log.warning(
            "INSECURE: %s is plain TCP (--insecure): nothing is encrypted and anyone who can reach it "
            "can call every tool and read every result; use CURVE keys ('mcp-supervisor keygen') instead",
            endpoint,
        )
        return None
    try:
        curve = ServerKeys.load(key_dir(keys))
    except KeyFileError as exc:
        raise StartError(
            f"{endpoint} is not an ipc:// endpoint, so it needs CURVE keys: {exc} (or pass --insecure "
            "for plain TCP: no encryption, and anyone who can reach the port can call every tool)",
            usage=True,
        ) from exc
    allowed = len(AllowedClients(curve.allowed).public_keys())
    log.info(
        "CURVE on %s: server key %s, %d allowed client keys in %s",
        endpoint,
        curve.public_file,
        allowed,
        curve.allowed,
    )
    if not allowed:
        log.warning("no client can connect yet: put their public keys (*.key) in %s", curve.allowed)
    return curve


def _site(option: str | None, setting: str | None, bucket: int) -> Site | None:
    """The HTTP listener for metrics and the status page, bound (None: neither ``--metrics`` nor the
    ``"metrics"`` setting asks for one), its charts ``bucket`` seconds a point (``statusBucket``)."""
    value = option if option is not None else setting
    if value is None:
        return None
    try:
        address = parse_address(value)
    except ValueError as exc:  # the setting was checked with the config: this is --metrics
        raise StartError(f"--metrics: {exc}", usage=True) from exc
    from supervisor.ops.web.site import Site  # the HTTP stack and prometheus_client: only when asked for

    try:
        site = Site.bind(address, bucket)
    except OSError as exc:
        raise StartError(f"cannot listen for metrics on {value}: {exc.strerror or exc}") from exc
    log.info("metrics and status page on %s", site.url)
    return site


def _say_memory_merge() -> None:
    """Say whether the workers' offer of their memory (``memoryMerge``) is taken up on this host."""
    running = ksm_running()
    if running:
        log.info("same-page merging (KSM) is on: pages the workers copy alike are folded back into one")
    elif running is False:
        log.info(
            "same-page merging (KSM) is off on this host: each worker keeps some 9 MB more of its own "
            "(echo 1 > /sys/kernel/mm/ksm/run as root turns it on; see the docs' Memory page)"
        )


def _start_tracing() -> None:
    """Trace calls in this process and (told by their boot lines) in every worker: ``--tracing`` or
    the ``"tracing"`` setting."""
    try:
        tracing_start(SUPERVISOR_SERVICE)
    except TracingUnavailable as exc:
        raise StartError(f"cannot trace: {exc}") from exc
    log.info("tracing calls (exported as the OTEL_* environment variables say)")


def _claim_endpoint(endpoint: str) -> None:
    """Refuse to start over a live supervisor; clear a stale ipc socket file."""
    path = ipc_path(endpoint)
    if path is None:
        return
    try:
        if path.parent == runtime_dir():
            ensure_runtime_dir(path.parent)
        else:
            claim_ipc_dir(path.parent)
    except OSError as exc:
        hint = f"use a private directory (the default endpoint is {default_endpoint()})"
        raise StartError(f"cannot listen on {endpoint}: {exc}; {hint}", usage=True) from exc
    if not path.exists():
        return
    try:
        with SupervisorClient(endpoint, request_timeout=1.0) as probe:
            probe.ping()
    except SupervisorError:
        path.unlink(missing_ok=True)  # left behind by a supervisor that was killed
        return
    raise StartError(f"a supervisor is already running at {endpoint}")


async def _serve(supervisor: Supervisor, site: Site | None = None) -> None:
    """Serve until SIGINT/SIGTERM or a ``Shutdown`` request; then drain in-flight calls (a second signal
    cuts that short) and stop. SIGHUP reloads the config file."""
    service = Service.open(supervisor)  # None unless systemd gave us $NOTIFY_SOCKET
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            if site is not None:  # listening before the servers start
                await nursery.start(site.serve, supervisor)
            await nursery.start(supervisor.run)
            if service is not None:
                nursery.start_soon(service.run)
            grace = await _wait_for_stop(supervisor, signals)
            if service is not None:
                service.stopping()
            async with trio.open_nursery() as draining:
                draining.start_soon(_cut_short, signals, draining.cancel_scope)
                await supervisor.drain(grace)
                draining.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    log.info("stopped")


async def _wait_for_stop(supervisor: Supervisor, signals: AsyncIterator[int]) -> float:
    """Return at SIGINT, SIGTERM or a ``Shutdown`` request, with the grace to drain with; reload on SIGHUP."""
    async with trio.open_nursery() as waiting:
        waiting.start_soon(_cancel_when_set, supervisor.shutdown_requested, waiting.cancel_scope)
        async for signum in signals:
            if signum == signal.SIGHUP:
                log.info("SIGHUP received; reloading the config")
                supervisor.reload_nowait()
                continue
            waiting.cancel_scope.cancel()
            grace = supervisor.config.settings.shutdown_grace  # as the last reload left it
            name = signal.Signals(signum).name
            log.info("%s received; finishing calls in flight (up to %g s)", name, grace)
            return grace
    asked = supervisor.shutdown_grace
    grace = supervisor.config.settings.shutdown_grace if asked is None else asked
    log.info("shutdown requested; finishing calls in flight (up to %g s)", grace)
    return grace


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _cut_short(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for signum in signals:
        if signum == signal.SIGHUP:
            continue
        log.warning("%s received again; stopping now", signal.Signals(signum).name)
        scope.cancel()
        return
