"""Confining a stdio server: bubblewrap for what it sees and reaches, limits for what it uses.

Above: ``workers.stdio``, which starts the server through ``Sandbox.argv`` with ``Sandbox.preexec``
run in the child before it executes bwrap, and ``workers.session``, which watches for a limit
reached (``Sandbox.breach``) and names it. Below: ``bwrap`` (Debian's ``bubblewrap``, as Flatpak
uses it), ``setrlimit`` and, where this process may make one, a cgroup (v1 ``memory`` and ``pids``).

The view: a private mount namespace with the system read-only (``/usr``, ``/etc``, ``/lib*``,
``/bin``, ``/sbin``, ``/opt``), the server's own installation (its command's prefix and its
interpreter's, and an absolute path to a file among its arguments, its script, each with the whole
``node_modules`` tree it is in, if any: read-only), its ``cwd`` read-write, the paths listed
``read``/``write``, and nothing else: ``$HOME``, ``/tmp``, ``/var/tmp`` and ``/run`` are empty and
private. No network (a network namespace of its own: only its own loopback) unless ``network`` is
true. Its own PID, IPC and UTS namespaces, no capabilities, no core dumps. The worker ends it as it
ends any server: bwrap's process group.

The limits: ``memory`` and ``processes`` are the sandbox's together when a cgroup can be made
(the kernel's own counters then say when one was reached); without one, each process may use an
eighth past ``memory`` before allocations fail (``RLIMIT_DATA``), so that its peak resident size
(``VmHWM``, which a look every ``SANDBOX_WATCH`` cannot miss) shows it passed the limit, and
``processes`` counts the sandbox's (``RLIMIT_NPROC``, set inside its user namespace; the kernel
never applies it to root, so a supervisor running as root needs the cgroup). ``cpu``: CPU seconds
per process (``RLIMIT_CPU``: SIGXCPU, then SIGKILL); ``files``: open files per process (``RLIMIT_NOFILE``).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Final

from supervisor.config.sandbox_entry import SandboxSpec, megabytes

__all__ = ["Sandbox", "SandboxUnavailable"]

SYSTEM: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
PRIVATE: Final = ("/tmp", "/var/tmp", "/run")
RESOLVER: Final = "/run/systemd/resolve"  # where /etc/resolv.conf often points
INSTALL_HINT: Final = (
    "install bubblewrap (Debian and Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap; "
    "Arch: pacman -S bubblewrap)"
)
USERNS_HINT: Final = (
    "bwrap needs user namespaces: allow them (sysctl kernel.unprivileged_userns_clone=1 on Debian; "
    "on Ubuntu 24.04 and later, AppArmor's bwrap profile) or install bwrap setuid"
)
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
LAUNCH: Final = (  # run inside the sandbox when RLIMIT_NPROC is to count only the sandbox's processes
    "import os,resource,sys;n=int(sys.argv[1]);resource.setrlimit(resource.RLIMIT_NPROC,(n,n));"
    "os.execvp(sys.argv[2],sys.argv[2:])"
)


class SandboxUnavailable(Exception):
    """The sandbox asked for cannot be made here; the message names what is missing and what to do."""


def find_bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(f"the server's sandbox needs bwrap, which is not on PATH: {INSTALL_HINT}")
    return found


def probe(bwrap: str, network: bool) -> None:
    """Make an empty sandbox of the same kind once: a kernel that refuses one fails here, saying why."""
    argv = [bwrap, "--unshare-all", *(["--share-net"] if network else []), "--ro-bind", "/", "/", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bwrap could not be run: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"status {done.returncode}"]
        raise SandboxUnavailable(f"bwrap cannot make a sandbox here ({said[0]}): {USERNS_HINT}")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _prefix(path: str) -> str:
    """The installation a program belongs to: the outermost ``node_modules`` it is in (a package sees
    its dependencies there), else the parent of its ``bin`` directory, else its directory."""
    if (at := path.find("/node_modules/")) != -1:
        return path[: at + len("/node_modules")]
    folder = os.path.dirname(path)
    return os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder


def _interpreter(path: str, search: str) -> str | None:
    """The program a script's ``#!`` line names (``/usr/bin/env NAME`` looked up on ``search``)."""
    try:
        with open(path, "rb") as file:
            head = file.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return shutil.which(words[-1] if words[1].startswith("-") else words[1], path=search)
    return words[0]


def installations(program: str, search: str, home: str | None) -> list[str]:
    """What must be visible for ``program`` to run: its installation's prefix and its interpreter's
    (through symlinks and ``#!`` lines), each outside the system directories; a prefix that would be
    ``/``, ``$HOME`` or above it is left at the program file itself."""
    found: list[str] = []
    todo, seen = [program], set[str]()
    while todo and len(seen) < 8:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for candidate in dict.fromkeys((path, os.path.realpath(path))):
            if any(_under(candidate, top) for top in SYSTEM):
                continue
            place = _prefix(candidate)
            if place in ("", "/") or (home is not None and _under(home, place)):
                place = candidate
            if place not in found:
                found.append(place)
        interpreter = _interpreter(path, search)
        if interpreter is not None:
            todo.append(interpreter)
    return found


class Cgroup:
    """A cgroup (v1) of the sandbox's own in the ``memory`` and ``pids`` hierarchies this process is in."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs  # by controller

    @classmethod
    def make(cls, name: str, spec: SandboxSpec) -> Cgroup | None:
        """One with the limits of ``spec`` set, or None where this process may not make one."""
        wanted = {"memory": spec.memory, "pids": spec.processes}
        dirs: dict[str, Path] = {}
        try:
            for controller, own in _own_cgroups().items():
                if wanted.get(controller) is None:
                    continue
                where = CGROUP_ROOT / controller / own.lstrip("/") / name
                _sweep(where.parent)
                where.mkdir(exist_ok=True)
                dirs[controller] = where
                if controller == "memory":
                    (where / "memory.limit_in_bytes").write_text(str(spec.memory))
                    swap = where / "memory.memsw.limit_in_bytes"
                    if swap.exists():
                        swap.write_text(str(spec.memory))  # and no swap beyond it
                else:
                    (where / "pids.max").write_text(str(spec.processes))
        except OSError:
            Cgroup(dirs).remove()
            return None
        if not dirs or any(
            wanted[controller] is not None and controller not in dirs for controller in wanted
        ):
            Cgroup(dirs).remove()
            return None
        return cls(dirs)

    def join_paths(self) -> list[str]:
        return [str(where / "cgroup.procs") for where in self.dirs.values()]

    def pids(self) -> list[int]:
        where = next(iter(self.dirs.values()), None)
        try:
            return [int(line) for line in (where / "cgroup.procs").read_text().split()] if where else []
        except OSError:
            return []

    def counter(self, controller: str, file: str, key: str) -> int:
        """A count from a flat keyed file: ``memory.oom_control``'s ``oom_kill``, ``pids.events``' ``max``."""
        where = self.dirs.get(controller)
        try:
            text = (where / file).read_text() if where is not None else ""
        except OSError:
            return 0
        for line in text.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == key and words[1].isdigit():
                return int(words[1])
        return 0

    def remove(self) -> None:
        for where in self.dirs.values():
            with suppress(OSError):  # still in use (a process not yet reaped): left, empty
                where.rmdir()


def _sweep(parent: Path) -> None:
    """Remove the cgroups of workers that are gone (one killed before it could remove its own)."""
    with suppress(OSError):
        for left in parent.glob("mcp-supervisor-*-*"):
            pid = left.name.rsplit("-", 1)[1]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                with suppress(OSError):
                    left.rmdir()


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path in each v1 hierarchy of ``memory`` and ``pids`` mounted as usual."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller in ("memory", "pids") and (CGROUP_ROOT / controller).is_dir():
                found[controller] = path
    return found


class Sandbox:
    """How one server is confined: the bwrap command line, the child's set-up, and what it reached."""

    def __init__(self, name: str, spec: SandboxSpec, cwd: str | None = None) -> None:
        """``cwd``: the server's, which must exist to be bound."""
        self.spec = spec
        self._bwrap = find_bwrap()
        probe(self._bwrap, spec.network)
        for kind, paths in (("read", spec.read), ("write", spec.write), ("cwd", (cwd,) if cwd else ())):
            for path in paths:
                if not os.path.isdir(path) if kind == "cwd" else not os.path.exists(path):
                    where = "cwd" if kind == "cwd" else f"sandbox.filesystem.{kind}"
                    raise SandboxUnavailable(f"{where}: {path} does not exist")
        self.cgroup = Cgroup.make(f"mcp-supervisor-{name.replace('/', '_')}-{os.getpid()}", spec)
        self._nproc_inside = spec.processes is not None and "pids" not in self._cgroups()
        if self._nproc_inside and os.geteuid() == 0:
            self.close()
            raise SandboxUnavailable(
                "a processes limit needs a pids cgroup when the supervisor runs as root (the kernel does "
                f"not apply RLIMIT_NPROC to root), and none could be made under {CGROUP_ROOT / 'pids'}"
            )

    @property
    def watched(self) -> bool:
        """Whether it has limits to look at while the server runs (``cpu`` needs none: SIGXCPU says it)."""
        spec = self.spec
        return any(limit is not None for limit in (spec.memory, spec.processes, spec.files))

    def _cgroups(self) -> dict[str, Path]:
        return self.cgroup.dirs if self.cgroup is not None else {}

    def argv(self, argv: list[str], env: dict[str, str], cwd: str | None) -> list[str]:
        """The command line that runs ``argv`` (its program resolved) in the sandbox."""
        spec, home = self.spec, env.get("HOME")
        # Not --die-with-parent: that ties the sandbox to the thread that started bwrap (trio starts
        # processes from a thread of its cache, which ends when idle). The worker ends the sandbox with
        # bwrap's process group, as it ends any server's.
        line = [self._bwrap, "--unshare-all", "--cap-drop", "ALL"]
        if spec.network:
            line.append("--share-net")
        for top in SYSTEM:
            line += ["--ro-bind-try", top, top]
        line += ["--proc", "/proc", "--dev", "/dev"]
        for top in PRIVATE:
            line += ["--tmpfs", top]
        if spec.network:
            line += ["--ro-bind-try", RESOLVER, RESOLVER]
        if home and home != "/" and not any(_under(home, top) for top in SYSTEM):
            line += ["--tmpfs", home]
        search = env.get("PATH", os.defpath)
        programs = [argv[0], *([sys.executable] if self._nproc_inside else [])]
        visible = [place for program in programs for place in installations(program, search, home)]
        scripts = [arg for arg in argv[1:] if os.path.isabs(arg) and os.path.isfile(arg)]
        visible += [_prefix(script) if "/node_modules/" in script else script for script in scripts]
        for path in dict.fromkeys([*visible, *spec.read]):
            line += ["--ro-bind", path, path]
        for path in spec.write:
            line += ["--bind", path, path]
        if cwd:
            line += ["--bind", cwd, cwd]
        line += ["--chdir", cwd or home or "/tmp", "--"]
        if self._nproc_inside:
            line += [os.path.realpath(sys.executable), "-S", "-I", "-c", LAUNCH, str(spec.processes)]
        return [*line, *argv]

    def preexec(self) -> Callable[[], None]:
        """What the child does before it executes bwrap: join the cgroup, set the limits."""
        spec, joins = self.spec, self.cgroup.join_paths() if self.cgroup is not None else []
        limits = [(resource.RLIMIT_CORE, 0, 0)]
        if spec.cpu is not None:
            limits.append((resource.RLIMIT_CPU, spec.cpu, spec.cpu + 1))
        if spec.files is not None:
            limits.append((resource.RLIMIT_NOFILE, spec.files, spec.files))
        if spec.memory is not None and "memory" not in self._cgroups():
            data = spec.memory + spec.memory // 8  # room to pass the limit, so that it shows (``breach``)
            limits.append((resource.RLIMIT_DATA, data, data))

        def child() -> None:
            for path in joins:
                with open(path, "w") as procs:
                    procs.write("0")
            for which, soft, hard in limits:
                resource.setrlimit(which, (soft, hard))

        return child

    def processes(self, root: int) -> list[int]:
        """The sandbox's processes: its cgroup's, or ``root`` and its descendants."""
        if self.cgroup is not None:
            return self.cgroup.pids()
        return list(_descendants(root))

    def breach(self, root: int | None) -> str | None:
        """The limit the sandbox reached, said as status says it, or None."""
        spec, cgroups = self.spec, self._cgroups()
        if spec.memory is not None and "memory" in cgroups and self._count("memory", "oom_kill"):
            return f"memory limit {megabytes(spec.memory)} exceeded"
        if spec.processes is not None and "pids" in cgroups and self._count("pids", "max"):
            return f"processes limit {spec.processes} reached"
        watched = (
            spec.files,
            *(
                limit
                for key, limit in (("pids", spec.processes), ("memory", spec.memory))
                if key not in cgroups
            ),
        )
        if root is None or all(limit is None for limit in watched):
            return None
        pids = self.processes(root)
        if spec.memory is not None and "memory" not in cgroups:
            peak = max((_peak_resident(pid) for pid in pids), default=0)
            if peak >= spec.memory:
                return f"memory limit {megabytes(spec.memory)} exceeded (a process used {megabytes(peak)})"
        if spec.processes is not None and "pids" not in cgroups and len(pids) >= spec.processes:
            return f"processes limit {spec.processes} reached"
        if spec.files is not None and any(_open_files(pid) >= spec.files for pid in pids):
            return f"files limit {spec.files} reached (a process had {spec.files} open)"
        return None

    def ended(self, code: int | None) -> str | None:
        """Which limit ended a server that exited with ``code`` (negative: killed by that signal)."""
        if code == -signal.SIGXCPU and self.spec.cpu is not None:
            return f"cpu limit {self.spec.cpu} s exceeded"
        return self.breach(None)

    def _count(self, controller: str, key: str) -> int:
        assert self.cgroup is not None
        file = "memory.oom_control" if controller == "memory" else "pids.events"
        return self.cgroup.counter(controller, file, key)

    def empty(self) -> bool:
        """Whether the sandbox's cgroup holds no process any more (True without one)."""
        return self.cgroup is None or not self.cgroup.pids()

    def close(self) -> None:
        """Once the server is gone: remove its cgroup."""
        if self.cgroup is not None:
            self.cgroup.remove()


def _descendants(root: int) -> Iterator[int]:
    todo = [root]
    while todo:
        pid = todo.pop()
        yield pid
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            with suppress(OSError):
                todo += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())


def _peak_resident(pid: int) -> int:
    """The most memory the process has had resident (``VmHWM``), in bytes."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0
