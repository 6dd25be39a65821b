"""The package as users get it: a wheel built from a clean copy of the source, installed into a fresh
virtual environment with its dependencies from the package index, running a real server.

The copy holds only what a checkout has (no ``*.egg-info`` left by an editable install, whose file
list setuptools would reuse), so a data file the build leaves out is missed here as it would be
for users. Building needs the package index for setuptools (build isolation), installing it for the
dependencies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("supervisor", "workers")  # what [tool.setuptools.packages.find] includes
SOURCES = ("pyproject.toml", "README.md", "LICENSE", *PACKAGES)  # what a build reads
BUILD_TIMEOUT = 300  # seconds for `python -m build --wheel` (setuptools from the index)
INSTALL_TIMEOUT = 600  # seconds for pip to install the wheel and its dependencies
COMMAND_TIMEOUT = 60  # seconds for one command of the installed package
STOP_TIMEOUT = 30  # seconds for the supervisor to exit after SIGTERM


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    home: Path  # a scratch directory: the working directory and the runtime directory's parent

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    @property
    def env(self) -> dict[str, str]:
        """The environment of a user of the installed package (nothing of this checkout's)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "VIRTUAL_ENV", "MCP_SUPERVISOR"))
        }
        run = self.home / "run"
        run.mkdir(mode=0o700, exist_ok=True)
        return env | {"XDG_RUNTIME_DIR": str(run), "PATH": f"{self.venv / 'bin'}:{env.get('PATH', '')}"}

    def run(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.bin("mcp-supervisor"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.home,
            env=self.env,
        )


def _clean_copy(destination: Path) -> Path:
    destination.mkdir()
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, destination / name)
    return destination


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    source = _clean_copy(base / "src")
    dist = base / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=COMMAND_TIMEOUT)
    pip_install = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    pip = subprocess.run(
        [*pip_install, "--no-input", "--quiet", f"{wheel}[servers]"],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    home = base / "home"
    home.mkdir()
    yield Installed(wheel, venv, home)


def test_the_wheel_holds_every_module_and_data_file_and_no_tests(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert expected - names == set()
    assert any(name.endswith(".html") for name in expected)  # the status page: a data file
    console = {f"supervisor/ops/web/{name}" for name in ("page.html", "page.css", "page.js", "views.js")}
    assert {"supervisor/py.typed", *console} <= names  # typed; the console's page and its files
    packaged = {name for name in names if ".dist-info/" not in name}
    assert packaged - expected == set()  # nothing else: no tests, no config, no benchmarks
    assert not [name for name in names if name.startswith("tests/")]
    dist_info = next(name.split("/")[0] for name in names if ".dist-info/" in name)
    assert f"{dist_info}/licenses/LICENSE" in names
    entry_points = zipfile.ZipFile(installed.wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "mcp-supervisor = supervisor.cli.main:main" in entry_points


def test_the_installed_package_is_the_wheel_not_this_checkout(installed: Installed) -> None:
    where = subprocess.run(
        [
            installed.bin("python"),
            "-c",
            "import supervisor, workers; print(supervisor.__file__, workers.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        cwd=installed.home,
        env=installed.env,
    )
    assert where.returncode == 0, where.stderr
    for module in where.stdout.split():
        assert Path(module).is_relative_to(installed.venv), module


def test_the_installed_package_exports_the_client_library(installed: Installed) -> None:
    imported = subprocess.run(
        [installed.bin("python"), "-c", "from supervisor import AsyncSupervisorClient, SupervisorClient"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        cwd=installed.home,
        env=installed.env,
    )
    assert imported.returncode == 0, imported.stderr


def test_version_matches_pyproject_and_help_works(installed: Installed) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    shown = installed.run("--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"mcp-supervisor {version}"
    helped = installed.run("--help")
    assert helped.returncode == 0, helped.stderr
    assert "run" in helped.stdout and "status" in helped.stdout
    assert installed.run("no-such-command").returncode == 2


def test_the_installed_supervisor_runs_a_pypi_server_and_stops_on_sigterm(installed: Installed) -> None:
    config = installed.home / "mcp.json"
    time_server = {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}
    config.write_text(json.dumps({"mcpServers": {"time": time_server}}))
    log = (installed.home / "supervisor.log").open("wb")
    supervisor = subprocess.Popen(
        [installed.bin("mcp-supervisor"), "run", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=installed.home,
        env=installed.env,
    )
    try:
        waited = installed.run("wait", "--timeout", str(COMMAND_TIMEOUT), timeout=COMMAND_TIMEOUT + 10)
        assert waited.returncode == 0, waited.stdout + waited.stderr + _log(installed)
        called = installed.run("call", "mcp_time_get_current_time", '{"timezone": "UTC"}')
        assert called.returncode == 0, called.stderr
        assert re.search(r'"timezone":\s*"UTC"', called.stdout), called.stdout
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(STOP_TIMEOUT) == 0, _log(installed)
        assert installed.run("status").returncode == 3  # gone: no supervisor answers
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(5)
        log.close()


def _log(installed: Installed) -> str:
    return "\n" + (installed.home / "supervisor.log").read_text(errors="replace")[-5000:]
