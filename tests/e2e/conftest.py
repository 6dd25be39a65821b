"""Fixtures for end-to-end tests: real supervisor, worker and MCP server processes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import SupervisorProcess, stdio_test_server

Start = Callable[..., SupervisorProcess]


@pytest.fixture(scope="session", autouse=True)
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every supervisor the tests start keeps its state (its audit trail, OAuth tokens) under the run's
    temporary directory, not the home directory's (a test may still give its own XDG_STATE_HOME)."""
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))
    yield
    if saved is None:
        del os.environ["XDG_STATE_HOME"]
    else:
        os.environ["XDG_STATE_HOME"] = saved


@contextmanager
def _starting(directory: Callable[[int], Path]) -> Iterator[Start]:
    """A ``start`` whose supervisors (the n-th in ``directory(n)``) are all stopped at the end."""
    started: list[SupervisorProcess] = []

    def start(servers: dict[str, Any], *, wait: bool = True, **kwargs: Any) -> SupervisorProcess:
        sup = SupervisorProcess(directory(len(started)), servers, **kwargs)
        started.append(sup)
        if wait:
            sup.wait_states()
        return sup

    yield start
    for sup in started:
        sup.stop()


@pytest.fixture
def start_supervisor(tmp_path: Path) -> Iterator[Start]:
    """Start supervisors for one test; each is stopped (and checked for leftovers) afterwards."""
    with _starting(lambda n: tmp_path / f"sup{n}") as start:
        yield start


@pytest.fixture(scope="module")
def start_module_supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Start]:
    """As ``start_supervisor``, for a module's fixtures: its supervisors serve every test of the
    module, and are stopped when the module's tests are done."""
    with _starting(lambda n: tmp_path_factory.mktemp("sup")) as start:
        yield start


@pytest.fixture(scope="module")
def shared(start_module_supervisor: Start) -> SupervisorProcess:
    """One supervisor for the tests of a module that only call tools: the test server and mcp-server-time."""
    return start_module_supervisor(
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
