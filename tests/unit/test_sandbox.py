"""``workers.sandbox``: what a sandboxed program sees, and the limits it runs under, with real bwrap runs.

The programs run here are small Python snippets under the command line ``Sandbox.argv`` makes,
started with ``Sandbox.preexec`` as the worker starts a server. The path without a cgroup (rlimits
only) is taken by making ``Cgroup.make`` find none.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor.config.sandbox_entry import SandboxSpec
from workers import sandbox as sandbox_module
from workers.sandbox import Sandbox, SandboxUnavailable, find_bwrap, installations, probe

try:
    probe(find_bwrap(), network=False)
    WHY_NOT = None
except SandboxUnavailable as exc:
    WHY_NOT = str(exc)

needs_bwrap = pytest.mark.skipif(WHY_NOT is not None, reason=f"no sandbox can be made here: {WHY_NOT}")

LOOK = """
import json, os, resource, socket, sys
def can(f):
    try:
        f(); return True
    except OSError:
        return False
home = os.environ["HOME"]
print(json.dumps({
    "cwd": os.getcwd(),
    "home": sorted(os.listdir(home)),
    "hidden": can(lambda: open(os.environ.get("HIDDEN", "/x")).read()),
    "readable": can(lambda: open(os.environ.get("READABLE", "/x")).read()),
    "write_read_only": can(lambda: open(os.environ.get("READABLE", "/x") + ".new", "w").close()),
    "writable": can(lambda: open(os.environ.get("WRITABLE", "/x") + "/new", "w").close()),
    "usr": can(lambda: open("/usr/sandbox-test", "w").close()),
    "uid_caps": open("/proc/self/status").read().split("CapEff:")[1].split()[0],
    "net": sorted(name for _, name in socket.if_nameindex()),
    "files": resource.getrlimit(resource.RLIMIT_NOFILE),
    "cpu": resource.getrlimit(resource.RLIMIT_CPU),
    "data": resource.getrlimit(resource.RLIMIT_DATA),
    "nproc": resource.getrlimit(resource.RLIMIT_NPROC),
    "pid": os.getpid(),
}))
"""


def _run(
    box: Sandbox, argv: list[str], env: dict[str, str], cwd: str | None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        box.argv(argv, env, cwd),
        env=env,
        preexec_fn=box.preexec(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    made = {name: tmp_path / name for name in ("home", "cwd", "readable", "writable", "outside")}
    for path in made.values():
        path.mkdir()
    (made["home"] / ".ssh").mkdir()
    (made["home"] / ".ssh" / "id_ed25519").write_text("private key")
    (made["readable"] / "notes.txt").write_text("notes")
    return made


@needs_bwrap
def test_a_sandboxed_program_sees_its_view_and_nothing_else(places: dict[str, Path]) -> None:
    spec = SandboxSpec(read=(str(places["readable"]),), write=(str(places["writable"]),), files=100, cpu=30)
    box = Sandbox("look", spec)
    env = {
        "HOME": str(places["home"]),
        "HIDDEN": str(places["home"] / ".ssh" / "id_ed25519"),
        "READABLE": str(places["readable"] / "notes.txt"),
        "WRITABLE": str(places["writable"]),
    }
    done = _run(box, [sys.executable, "-c", LOOK], env, str(places["cwd"]))
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    assert seen["cwd"] == str(places["cwd"])
    assert seen["home"] == []  # an empty home of its own: ~/.ssh is not there  # ~/.ssh is not there
    assert not seen["hidden"]
    assert seen["readable"] and not seen["write_read_only"]
    assert seen["writable"] and (places["writable"] / "new").exists()
    assert not seen["usr"]
    assert int(seen["uid_caps"], 16) == 0
    assert seen["files"] == [100, 100] and seen["cpu"] == [30, 31]
    assert seen["pid"] < 10  # a PID namespace of its own
    box.close()


@needs_bwrap
def test_without_a_cgroup_memory_is_each_processs_data_and_allocations_past_it_fail(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_module.Cgroup, "make", classmethod(lambda cls, name, spec: None))
    box = Sandbox("memory", SandboxSpec(memory=64 << 20))
    bomb = "c = []\ntry:\n    while True: c.append(b'x' * (8 << 20))\nexcept MemoryError: print('refused')"
    done = _run(box, [sys.executable, "-c", bomb], {"HOME": str(places["home"])}, None)
    assert done.stdout.strip() == "refused", done.stderr
    look = _run(box, [sys.executable, "-c", LOOK], {"HOME": str(places["home"])}, None)
    assert json.loads(look.stdout)["data"] == [72 << 20, 72 << 20]  # an eighth more: passing shows


@needs_bwrap
def test_without_a_cgroup_a_process_past_the_memory_limit_is_named_even_once_it_let_go(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The peak resident size shows a limit passed between two looks (the memory freed since)."""
    monkeypatch.setattr(sandbox_module.Cgroup, "make", classmethod(lambda cls, name, spec: None))
    box = Sandbox("memory", SandboxSpec(memory=64 << 20))
    spike = "c = [b'x' * (8 << 20) for _ in range(7)]\ndel c\nprint('let go', flush=True)\ninput()"
    argv = box.argv([sys.executable, "-c", spike], {"HOME": str(places["home"])}, None)
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        preexec_fn=box.preexec(),
        text=True,
        start_new_session=True,
    ) as process:
        assert process.stdout is not None and process.stdout.readline() == "let go\n"
        why = box.breach(process.pid)
        os.killpg(process.pid, signal.SIGKILL)  # bwrap and the sandbox
    assert why is not None and why.startswith("memory limit 64 MB exceeded (a process used "), why
    calm = box.argv(
        [sys.executable, "-c", "import time; time.sleep(30)"], {"HOME": str(places["home"])}, None
    )
    with subprocess.Popen(calm, preexec_fn=box.preexec(), start_new_session=True) as process:
        assert box.breach(process.pid) is None
        os.killpg(process.pid, signal.SIGKILL)


def test_without_a_pids_cgroup_a_processes_limit_for_root_is_refused_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if WHY_NOT is not None:
        pytest.skip(WHY_NOT)
    monkeypatch.setattr(sandbox_module.Cgroup, "make", classmethod(lambda cls, name, spec: None))
    monkeypatch.setattr(sandbox_module.os, "geteuid", lambda: 0)
    with pytest.raises(SandboxUnavailable, match="the kernel does not apply RLIMIT_NPROC to root"):
        Sandbox("forks", SandboxSpec(processes=8))


@needs_bwrap
def test_without_a_pids_cgroup_the_processes_limit_is_set_inside_the_sandboxs_user_namespace(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a supervisor that is not root runs it: RLIMIT_NPROC is set by a launcher in the sandbox."""
    monkeypatch.setattr(sandbox_module.Cgroup, "make", classmethod(lambda cls, name, spec: None))
    monkeypatch.setattr(sandbox_module.os, "geteuid", lambda: 1000)
    box = Sandbox("forks", SandboxSpec(processes=8))
    done = _run(box, [sys.executable, "-c", LOOK], {"HOME": str(places["home"])}, None)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nproc"] == [8, 8]


@needs_bwrap
def test_no_network_means_only_a_loopback_of_its_own(places: dict[str, Path]) -> None:
    env = {"HOME": str(places["home"])}
    argv = [sys.executable, "-c", LOOK]
    closed = json.loads(_run(Sandbox("closed", SandboxSpec()), argv, env, None).stdout)
    assert closed["net"] == ["lo"]
    opened = json.loads(_run(Sandbox("open", SandboxSpec(network=True)), argv, env, None).stdout)
    assert set(opened["net"]) == {name for _, name in socket.if_nameindex()}  # the host's


def test_what_must_be_visible_for_a_program_to_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    venv = home / "project" / ".venv"
    (venv / "bin").mkdir(parents=True)
    interpreter = tmp_path / "pythons" / "3.11" / "bin" / "python3.11"
    interpreter.parent.mkdir(parents=True)
    interpreter.write_text("")
    (venv / "bin" / "python").symlink_to(interpreter)
    script = venv / "bin" / "server"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport server\n")
    assert installations(str(script), "", str(home)) == [str(venv), str(interpreter.parents[1])]
    loose = home / "server.sh"  # a program right in $HOME: only the file, never the home itself
    loose.write_text("#!/bin/sh\n")
    assert installations(str(loose), "", str(home)) == [str(loose)]
    assert installations("/usr/bin/env", "", str(home)) == []  # the system is visible anyway
    node = tmp_path / "node" / "bin" / "node"
    node.parent.mkdir(parents=True)
    node.write_text("")
    node.chmod(0o755)
    tool = tmp_path / "tool" / "index.js"
    tool.parent.mkdir()
    tool.write_text("#!/usr/bin/env node\n")
    assert installations(str(tool), str(node.parent), str(home)) == [str(tool.parent), str(node.parents[1])]
    modules = tmp_path / "app" / "node_modules"  # a package's command: the whole tree, for its dependencies
    entry = modules / "@scope" / "server" / "dist" / "index.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("#!/usr/bin/env node\n")
    (modules / ".bin").mkdir()
    (modules / ".bin" / "server").symlink_to(entry)
    assert installations(str(modules / ".bin" / "server"), str(node.parent), str(home)) == [
        str(modules),
        str(node.parents[1]),
    ]


def test_a_listed_path_that_does_not_exist_is_named(tmp_path: Path) -> None:
    if WHY_NOT is not None:
        pytest.skip(WHY_NOT)
    missing = str(tmp_path / "nope")
    with pytest.raises(SandboxUnavailable, match=f"sandbox.filesystem.write: {missing} does not exist"):
        Sandbox("x", SandboxSpec(write=(missing,)))
    with pytest.raises(SandboxUnavailable, match=f"cwd: {missing} does not exist"):
        Sandbox("x", SandboxSpec(), cwd=missing)


def test_without_bwrap_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SandboxUnavailable, match="needs bwrap, which is not on PATH: install bubblewrap"):
        find_bwrap()


def test_a_kernel_that_refuses_namespaces_is_named_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bwrap's own words, and how to allow user namespaces (a bwrap that fails as a refusing kernel
    makes it fail)."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable) as refused:
        Sandbox("x", SandboxSpec())
    said = str(refused.value)
    assert said.startswith("bwrap cannot make a sandbox here (bwrap: No permissions to create new namespace)")
    assert "kernel.unprivileged_userns_clone=1" in said and "AppArmor" in said
