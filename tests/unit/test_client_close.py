"""Closing a blocking client while other threads wait on it: they get a SupervisorError, not a ZMQError."""

from __future__ import annotations

import threading
from pathlib import Path

import zmq

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorError

WAIT = 10.0  # seconds a thread may take to notice the close


def test_close_from_another_thread_ends_waiting_calls_with_a_clear_error(tmp_path: Path) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)  # takes requests, never answers
    endpoint = f"ipc://{tmp_path / 'silent.sock'}"
    silent.bind(endpoint)
    client = SupervisorClient(endpoint, request_timeout=30.0)
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            client.call_tool("mcp_x_y", {}, timeout=30)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for thread in threads:
        thread.start()
    for _ in threads:  # every request has reached the silent socket: each thread now waits in poll
        assert silent.poll(int(WAIT * 1000))
        silent.recv_multipart()
    client.close()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    silent.close(linger=0)
    ctx.term()
    assert len(errors) == 4
    for exc in errors:
        assert isinstance(exc, SupervisorError), repr(exc)
        assert "client is closed" in str(exc)
