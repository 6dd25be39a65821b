"""Fixtures for end-to-end tests: real supervisor, worker and MCP server processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import SupervisorProcess, stdio_test_server


@pytest.fixture
def start_supervisor(tmp_path: Path) -> Iterator[Callable[..., SupervisorProcess]]:
    """Start supervisors for one test; each is stopped (and checked for leftovers) afterwards."""
    started: list[SupervisorProcess] = []

    def start(servers: dict[str, Any], *, wait: bool = True, **kwargs: Any) -> SupervisorProcess:
        sup = SupervisorProcess(tmp_path / f"sup{len(started)}", servers, **kwargs)
        started.append(sup)
        if wait:
            sup.wait_states()
        return sup

    yield start
    for sup in started:
        sup.stop()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SupervisorProcess]:
    """One supervisor for the tests of a module that only call tools: the test server and mcp-server-time."""
    sup = SupervisorProcess(
        tmp_path_factory.mktemp("shared"),
        {
            "test": stdio_test_server(
                TEST_SERVER_PAGE_SIZE=3,
                TEST_SERVER_EXTRA_TOOLS=7,
                TEST_SERVER_STATE_DIR="{state}",
                TEST_SERVER_STARTUP_STDERR="test server says hello",
                SECRET_TOKEN="s3cr3t-d0-not-log",
            ),
            "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "toolTimeout": 10},
        },
    )
    try:
        sup.wait_states()
        yield sup
    finally:
        sup.stop()
