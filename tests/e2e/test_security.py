"""The front door, with real processes: CURVE on loopback TCP, --insecure, private ipc directories,
and config files or server names that must not reach the supervisor's log raw.

Every TCP endpoint here is on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from time import monotonic

import pytest
import trio
import zmq

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from supervisor.client.aio_events import AsyncEventWatch
from supervisor.client.errors import SupervisorAuthenticationError
from supervisor.client.watch import EventWatch
from supervisor.protocol import Ping, StateChanged, encode
from supervisor.security.keys import KEYS_ENV, keygen
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
CLI_TIMEOUT = 30  # seconds for one CLI command
SILENCE = 2.0  # seconds a refused peer waits to show it gets nothing (beacons come every second)
FAST = 5.0  # seconds within which a refused handshake must be reported (requests wait 30 s here)


def loopback() -> str:
    """A tcp:// endpoint on 127.0.0.1 at a port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def make_keys(tmp: Path, name: str = "keys") -> Path:
    keygen(tmp / name)
    return tmp / name


def stranger_keys(tmp: Path, server_keys: Path) -> Path:
    """A client key pair the supervisor does not allow, with the supervisor's public key."""
    directory = tmp / "stranger"
    keygen(directory, server=False)
    shutil.copy(server_keys / "server.key", directory / "server.key")
    return directory


def cli(*args: str, endpoint: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "supervisor", *args, "--endpoint", endpoint]
    environ = {**os.environ, **(env or {})}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False, env=environ
    )


def empty_config(tmp: Path) -> Path:
    path = tmp / "empty.json"
    path.write_text('{"mcpServers": {}}')
    return path


@pytest.fixture
def curve(start_supervisor: Start, tmp_path: Path) -> SupervisorProcess:
    """A supervisor on loopback TCP with CURVE keys; its harness client is an allowed one."""
    return start_supervisor({"test": stdio_test_server()}, endpoint=loopback(), keys=make_keys(tmp_path))


def keys_of(sup: SupervisorProcess) -> Path:
    return sup.tmp.parent / "keys"


# --- CURVE on tcp:// -------------------------------------------------------------------------


def test_allowed_client_calls_a_tool_over_curve_and_the_cli_finds_its_keys_in_the_env(
    curve: SupervisorProcess,
) -> None:
    assert curve.client.call_tool("mcp_test_echo", {"text": "sealed"}).text == "sealed"
    done = cli(
        "call",
        "mcp_test_echo",
        '{"text": "by cli"}',
        endpoint=curve.endpoint,
        env={KEYS_ENV: str(keys_of(curve))},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "by cli"
    assert "CURVE on " + curve.endpoint in curve.log


async def test_async_client_calls_and_watches_events_over_curve(curve: SupervisorProcess) -> None:
    async with AsyncSupervisorClient(curve.endpoint, keys=keys_of(curve)) as sup:
        assert (await sup.call_tool("mcp_test_echo", {"text": "async"})).text == "async"
        async with await sup.watch() as events, aclosing(aiter(events)) as stream:
            await sup.restart("test")
            with trio.fail_after(30):
                event = await anext(stream)
            assert isinstance(event, StateChanged)
            assert (event.server, event.state) == ("test", "restarting")


def test_client_with_a_key_not_allowed_gets_an_authentication_error_at_once(
    curve: SupervisorProcess, tmp_path: Path
) -> None:
    stranger = stranger_keys(tmp_path, keys_of(curve))
    with SupervisorClient(curve.endpoint, keys=stranger, request_timeout=30) as client:
        started = monotonic()
        with pytest.raises(SupervisorAuthenticationError, match="refused this client's CURVE key") as caught:
            client.call_tool("mcp_test_echo", {"text": "let me in"})
        assert monotonic() - started < FAST
    assert "allowed_clients" in str(caught.value)
    done = cli("status", endpoint=curve.endpoint, env={KEYS_ENV: str(stranger)})
    assert done.returncode == 3
    assert "UNAUTHENTICATED: the supervisor at" in done.stderr and "Traceback" not in done.stderr
    poll("the refusal in the log", lambda: "refused a client whose CURVE public key" in curve.log, 10)


async def test_async_client_with_a_key_not_allowed_is_refused_at_once_until_the_key_is_allowed(
    curve: SupervisorProcess, tmp_path: Path
) -> None:
    stranger = stranger_keys(tmp_path, keys_of(curve))
    async with AsyncSupervisorClient(curve.endpoint, keys=stranger, request_timeout=30) as client:
        for _ in range(2):
            started = monotonic()
            with pytest.raises(SupervisorAuthenticationError, match="refused this client's CURVE key"):
                await client.ping()
            assert monotonic() - started < FAST
        watch = AsyncEventWatch(curve.client.events_endpoint(), keys=stranger)
        started = monotonic()
        with pytest.raises(SupervisorAuthenticationError, match="refused this client's CURVE key"):
            await watch.join(timeout=30)
        assert monotonic() - started < FAST
        shutil.copy(stranger / "client.key", keys_of(curve) / "allowed_clients" / "stranger.key")
        with trio.fail_after(30):
            await client.ping()


def test_a_key_added_to_allowed_clients_is_let_in_without_a_restart(
    curve: SupervisorProcess, tmp_path: Path
) -> None:
    stranger = stranger_keys(tmp_path, keys_of(curve))
    with SupervisorClient(curve.endpoint, keys=stranger, request_timeout=30) as client:
        for _ in range(2):  # each request gets a handshake of its own, and a prompt refusal
            started = monotonic()
            with pytest.raises(SupervisorAuthenticationError):
                client.ping()
            assert monotonic() - started < FAST
        shutil.copy(stranger / "client.key", keys_of(curve) / "allowed_clients" / "stranger.key")
        assert client.call_tool("mcp_test_echo", {"text": "welcome"}).text == "welcome"


def test_plain_client_gets_nothing_from_a_curve_supervisor_and_the_stub_says_why(
    curve: SupervisorProcess,
) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(curve.endpoint)
        raw.send(encode(Ping(id=1)))
        assert raw.poll(int(SILENCE * 1000)) == 0
    finally:
        ctx.destroy(linger=0)
    with SupervisorClient(curve.endpoint, keys=False, request_timeout=30) as plain:
        started = monotonic()
        with pytest.raises(SupervisorAuthenticationError, match="requires CURVE"):
            plain.ping()
        assert monotonic() - started < FAST


def test_events_over_curve_reach_allowed_clients_only(curve: SupervisorProcess, tmp_path: Path) -> None:
    with curve.client.watch() as events:
        curve.client.restart("test")
        event = events.next(timeout=30)
        assert isinstance(event, StateChanged) and event.state == "restarting"
    endpoint = curve.client.events_endpoint()
    assert endpoint.startswith("tcp://127.0.0.1:")
    stranger = stranger_keys(tmp_path, keys_of(curve))
    watch = EventWatch(endpoint, keys=stranger)
    with pytest.raises(SupervisorAuthenticationError, match="refused"):
        watch.join(timeout=30)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        plain = ctx.socket(zmq.SUB)
        plain.setsockopt(zmq.LINGER, 0)
        plain.setsockopt(zmq.SUBSCRIBE, b"")
        plain.connect(endpoint)
        assert plain.poll(int(SILENCE * 1000)) == 0  # an allowed subscriber gets a beacon every second
    finally:
        ctx.destroy(linger=0)


# --- run: keys or --insecure -----------------------------------------------------------------


def test_run_on_tcp_without_keys_or_insecure_exits_2_saying_how_to_make_keys(tmp_path: Path) -> None:
    endpoint = loopback()
    done = cli("run", str(empty_config(tmp_path)), endpoint=endpoint, env={KEYS_ENV: str(tmp_path / "none")})
    assert done.returncode == 2, done.stderr
    assert f"{endpoint} is not an ipc:// endpoint, so it needs CURVE keys" in done.stderr
    assert f"mcp-supervisor keygen {tmp_path / 'none'}" in done.stderr
    assert "--insecure" in done.stderr and "Traceback" not in done.stderr


def test_run_with_insecure_serves_plain_tcp_and_warns_in_the_log(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()}, endpoint=loopback(), args=["--insecure"])
    assert sup.client.call_tool("mcp_test_echo", {"text": "plain"}).text == "plain"
    warning = next(line for line in sup.log.splitlines() if "INSECURE" in line)
    assert "WARNING" in warning and sup.endpoint in warning and "anyone who can reach it" in warning


def test_run_refuses_a_secret_key_other_users_can_read(tmp_path: Path) -> None:
    keys = make_keys(tmp_path)
    (keys / "server.key_secret").chmod(0o644)
    done = cli("run", str(empty_config(tmp_path)), "--keys", str(keys), endpoint=loopback())
    assert done.returncode == 2
    assert f"{keys / 'server.key_secret'} can be read by other users (mode 0644)" in done.stderr


def test_keygen_makes_private_secrets_and_says_where_each_key_goes(tmp_path: Path) -> None:
    directory = tmp_path / "new" / "keys"
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "keygen", str(directory)],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=True,
    )
    for name in (
        "server.key_secret",
        "server.key",
        "client.key_secret",
        "client.key",
        "allowed_clients/client.key",
    ):
        assert f"created  {directory / name}" in done.stdout
    assert stat.S_IMODE((directory / "server.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / "client.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert "keygen --client-only" in done.stdout and f"--keys {directory}" in done.stdout
    again = subprocess.run(
        [sys.executable, "-m", "supervisor", "keygen", str(directory)],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=True,
    )
    assert f"kept     {directory / 'server.key_secret'}" in again.stdout


# --- ipc:// directories ----------------------------------------------------------------------


def test_run_refuses_an_ipc_endpoint_in_a_directory_others_can_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    done = cli("run", str(empty_config(tmp_path)), endpoint=f"ipc://{shared}/s.sock")
    assert done.returncode == 2, done.stderr
    assert f"directory {shared} is writable by other users (mode 1777)" in done.stderr
    assert not (shared / "s.sock").exists()


def test_run_creates_a_missing_ipc_directory_private_and_its_socket_owner_only(
    start_supervisor: Start, tmp_path: Path
) -> None:
    directory = tmp_path / "fresh" / "run"
    sup = start_supervisor({"test": stdio_test_server()}, endpoint=f"ipc://{directory}/s.sock")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "s.sock").stat().st_mode) == 0o600
    assert sup.client.call_tool("mcp_test_echo", {"text": "private"}).text == "private"


# --- what the config may not smuggle in -------------------------------------------------------


def test_server_name_with_a_newline_is_rejected_with_the_name_escaped_in_the_log(
    start_supervisor: Start,
) -> None:
    sup = start_supervisor({"good": stdio_test_server(), "bad\nERROR forged line": stdio_test_server()})
    assert list(sup.status()) == ["good"]
    assert "server 'bad\\nERROR forged line': server name must be printable" in sup.log
    assert not any(line.startswith("ERROR forged line") for line in sup.log.splitlines())


BAD_FILES = {
    "not-utf8": (
        b'{"mcpServers": {"s\xff": {"command": "x"}}}',
        "not UTF-8 text: byte 0xff at line 1, column 19",
    ),
    "too-deep": (b'{"mcpServers": {"s": ' + b"[" * 1000 + b"]" * 1000 + b"}}", "nested too deeply"),
    "out-of-range": (
        b'{"mcpServers": {}, "supervisor": {"shutdownGrace": 1e999}}',
        "\"supervisor\": field 'shutdownGrace': number out of range",
    ),
}


@pytest.mark.parametrize(("content", "message"), BAD_FILES.values(), ids=BAD_FILES.keys())
def test_run_rejects_a_config_file_that_is_not_utf8_too_deep_or_out_of_range(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(content)
    done = cli("run", str(path), endpoint=f"ipc://{tmp_path}/s.sock")
    assert done.returncode == 2, done.stderr
    assert f"{path}: {message}" in done.stderr
    assert "Traceback" not in done.stderr


def test_reload_rejects_a_config_file_that_is_not_utf8_too_deep_or_out_of_range(
    start_supervisor: Start,
) -> None:
    sup = start_supervisor({"keep": stdio_test_server()})
    before = sup.status()
    for what, (content, message) in BAD_FILES.items():
        sup.config.write_bytes(content)
        done = cli("reload", endpoint=sup.endpoint)
        assert done.returncode == 2, (what, done.stderr)
        assert f"config rejected, nothing changed: {sup.config}: {message}" in done.stderr, what
        assert sup.status() == before, what
    sup.config.write_text(json.dumps({"mcpServers": {"keep": stdio_test_server()}}))
    assert sup.client.call_tool("mcp_keep_echo", {"text": "still"}).text == "still"
