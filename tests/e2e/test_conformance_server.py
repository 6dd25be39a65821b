"""The official MCP conformance suite's server scenarios, through the HTTP facade of one server.

The suite's reference server (``tests/npm/conformance-server.mts``, its ``everything-server`` at the
pinned version) runs on HTTP; a real supervisor holds it as the remote server ``conf`` (with
``"sampling": "caller"``, so that a host's sampling reaches it); ``serve --http --server conf``
serves it under its own names. Each server scenario the suite lists (``conformance list --server``,
asked at collection time) then runs against the facade with ``--suite all``: one facade, one
supervisor and one server for all of them, as a host's many sessions would share them.

A scenario passes when the suite exits 0 and every check that is not ``INFO`` is ``SUCCESS``
(``INFO`` checks are the suite's log of requests; a ``WARNING`` is a SHOULD the facade misses, and
fails the test here although the suite's own verdict lets it through).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from tests.e2e.facade import HttpFacade
from tests.e2e.harness import NPM, NodeHttpServer, SupervisorProcess
from tests.e2e.test_conformance import NODE, SUITE, list_scenarios

pytestmark = pytest.mark.e2e

REFERENCE: Final = NPM / "conformance-server.mts"
RUN_TIMEOUT: Final = 90.0  # seconds for one `conformance server --scenario` run
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


SCENARIOS, LIST_ERROR = list_scenarios("server")


# Its own start, not start_module_supervisor: the reference server starts before the supervisor (its
# URL is in the config) and stops after it, with the facade stopped before either.
class Stack:
    """The reference server, a supervisor holding it, and the one-server HTTP facade in front."""

    def __init__(self, tmp: Path) -> None:
        self.reference = NodeHttpServer(tmp, REFERENCE)
        url = f"http://127.0.0.1:{self.reference.port}/mcp"
        self.supervisor = SupervisorProcess(
            tmp, {"conf": {"url": url, "sampling": "caller"}}, log_level="info"
        )
        self.facade: HttpFacade | None = None
        try:
            self.supervisor.wait_states(conf="ready")
            self.facade = HttpFacade(tmp, self.supervisor.endpoint, None, "--server", "conf")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.facade is not None:
            self.facade.stop()
        self.supervisor.stop()
        self.reference.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(tmp_path_factory.mktemp("conformance-server"))
    yield stack
    stack.stop()


def _checks(results: Path) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    for path in sorted(results.glob("*/checks.json")):
        checks += json.loads(path.read_text())
    return checks


@pytest.mark.skipif(LIST_ERROR is not None, reason=LIST_ERROR or "")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_server_scenario_passes_through_the_facade(stack: Stack, scenario: str, tmp_path: Path) -> None:
    assert stack.facade is not None
    results = tmp_path / "results"
    argv = [NODE, str(SUITE), "server", "--url", stack.facade.url, "--scenario", scenario]
    run = subprocess.run(
        [*argv, "--suite", "all", "-o", str(results)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
    )
    output = _ANSI.sub("", run.stdout + run.stderr)
    checks = _checks(results)
    verdicts = [check for check in checks if check.get("status") != "INFO"]
    wrong = [
        f"{check.get('id')}: {check.get('status')}: {check.get('errorMessage', '')}"
        for check in verdicts
        if check.get("status") != "SUCCESS"
    ]
    where = f"\n--- suite output ---\n{output[-4000:]}\n--- facade ---\n{stack.facade.stderr[-3000:]}"
    assert run.returncode == 0, f"the suite exited {run.returncode}{where}"
    assert checks, f"the suite wrote no checks for {scenario}{where}"
    assert not wrong, "\n".join(wrong) + where
