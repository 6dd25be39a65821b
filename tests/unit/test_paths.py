"""Where every process looks for the supervisor by default, whatever environment it was given."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from supervisor.shared import paths
from supervisor.shared.paths import default_endpoint, log_beside, runtime_dir


@pytest.fixture
def run_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for /run/user."""
    root = tmp_path / "run-user"
    root.mkdir()
    monkeypatch.setattr(paths, "RUN_USER", root)
    return root


def test_xdg_runtime_dir_comes_first(run_user: Path, tmp_path: Path) -> None:
    (run_user / str(os.getuid())).mkdir()
    assert runtime_dir({"XDG_RUNTIME_DIR": str(tmp_path)}) == tmp_path / "mcp-supervisor"


def test_without_xdg_runtime_dir_the_users_run_directory_stands_for_it(run_user: Path) -> None:
    """A host passes only HOME, PATH, SHELL, TERM, USER and LOGNAME: the facade it starts still finds
    the supervisor a login shell started under $XDG_RUNTIME_DIR (which is /run/user/$UID)."""
    mine = run_user / str(os.getuid())
    mine.mkdir(mode=0o700)
    host = {"HOME": "/home/x", "PATH": "/usr/bin", "SHELL": "/bin/sh", "TERM": "dumb", "USER": "x"}
    assert runtime_dir(host) == mine / "mcp-supervisor" == runtime_dir({"XDG_RUNTIME_DIR": str(mine)})
    assert default_endpoint(host) == f"ipc://{mine}/mcp-supervisor/supervisor.sock"


def test_without_either_the_temporary_directory_is_used(run_user: Path) -> None:
    assert runtime_dir({}) == Path(tempfile.gettempdir()) / f"mcp-supervisor-{os.getuid()}"
    (run_user / str(os.getuid())).write_text("not a directory")
    assert runtime_dir({}) == Path(tempfile.gettempdir()) / f"mcp-supervisor-{os.getuid()}"


def test_a_run_directory_of_another_user_is_not_used(run_user: Path) -> None:
    mine = run_user / str(os.getuid())
    mine.mkdir()
    if os.getuid() == 0:
        os.chown(mine, 12345, 12345)  # as root, give it away; else it is ours and this case cannot arise
        assert runtime_dir({}) == Path(tempfile.gettempdir()) / f"mcp-supervisor-{os.getuid()}"
    else:
        assert runtime_dir({}) == mine / "mcp-supervisor"


def test_each_supervisor_logs_beside_its_own_endpoint() -> None:
    assert log_beside("ipc:///run/user/7/mcp-supervisor/supervisor.sock") == Path(
        "/run/user/7/mcp-supervisor/supervisor.log"
    )
    assert log_beside("ipc:///tmp/x/other.sock") == Path("/tmp/x/other.log")
    tcp = log_beside("tcp://127.0.0.1:5555")
    assert tcp.name == "supervisor-127.0.0.1-5555.log"
    assert log_beside("tcp://127.0.0.1:5556") != tcp
