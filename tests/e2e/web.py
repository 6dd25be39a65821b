"""The HTTP listener of a real supervisor, for end-to-end tests: where it listens (from the log line
``metrics and status page on http://HOST:PORT/``), a scrape parsed by prometheus_client's own parser,
plain requests, and raw bytes on a socket."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import START_TIMEOUT, SupervisorProcess, poll

HTTP_TIMEOUT = 10.0  # seconds for one request
CONTROL = {"X-Requested-By": "mcp-supervisor"}  # what the status page's script sends with a control

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def listening(sup: SupervisorProcess) -> int:
    """The port of the supervisor's HTTP listener, from its log."""

    def port() -> int | None:
        if sup.process.poll() is not None:
            raise AssertionError(f"supervisor exited with {sup.process.returncode}:\n{sup.log}")
        match = re.search(r"metrics and status page on http://127\.0\.0\.1:(\d+)/", sup.log)
        return int(match.group(1)) if match else None

    return poll("the metrics listener's log line", port, START_TIMEOUT)  # type: ignore[no-any-return]


def request(
    port: int, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: status, headers (lower-case names), body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def request_json(port: int, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    status, _, body = request(port, method, path, headers)
    return status, json.loads(body)


def scrape(port: int) -> Series:
    """Every sample of ``/metrics``: (name, labels) -> value."""
    status, headers, body = request(port, "GET", "/metrics")
    assert status == 200, (status, body[:300])
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    series: Series = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            series[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return series


def value(series: Series, name: str, **labels: str) -> float:
    return series[(name, frozenset(labels.items()))]


def servers_in(series: Series) -> set[str]:
    return {dict(labels)["server"] for _, labels in series if "server" in dict(labels)}


def raw_exchange(port: int, data: bytes, timeout: float = HTTP_TIMEOUT) -> bytes:
    """Send ``data`` and read until the listener closes (or resets) the connection, bounded."""
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed on us: read why
            sock.sendall(data)
        received = b""
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk
    raise AssertionError(f"the listener did not close the connection within {timeout} s")
