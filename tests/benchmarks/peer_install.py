"""The peers measured by tests/benchmarks/peers.py and memory.py: each installed, pinned, in a venv of its
own under tests/benchmarks/.peers-venv (magg on a Python >= 3.12 from Debian when the machine has none),
never in the project's venv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.benchmarks.common import REPO

PEERS_DIR = REPO / "tests/benchmarks/.peers-venv"
PINS = {"fastmcp": "fastmcp==4.2.3", "mcp-proxy": "mcp-proxy==0.13.0", "magg": "magg==1.3.0"}
PIP_FOR_NEWER_PYTHON = "pip==25.3"  # run from its wheel by a Python that has no pip of its own
DEBIAN_SUITE = "trixie"  # Debian 13: python3.13, for a Debian 12 machine without Python >= 3.12
DEBIAN_PACKAGES = (
    "python3.13",
    "python3.13-minimal",
    "libpython3.13-minimal",
    "libpython3.13-stdlib",
    "libc6",
    "libexpat1",
    "zlib1g",
    "libssl3t64",
    "libzstd1",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libsqlite3-0",
    "libuuid1",
    "libmpdec4",
)
INSTALL_TIMEOUT = 900.0  # seconds for one install step


# ------------------------------------------------------------------ the peers' environments


class NotInstallable(Exception):
    """A peer that cannot be installed here; its message is the reason."""


@dataclass
class Peer:
    name: str
    python: Path | None = None  # the interpreter it runs from
    env: dict[str, str] = field(default_factory=dict)  # what it needs in its environment
    versions: dict[str, str] = field(default_factory=dict)
    problem: str | None = None  # why it is not there

    def command(self, script: str) -> Path:
        assert self.python is not None
        return self.python.with_name(script)


def run_step(argv: list[Any], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """One install step, bounded; its output when it worked."""
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
    )
    if done.returncode != 0:
        raise NotInstallable(f"{' '.join(map(str, argv[:3]))} ... failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def versions_of(python: Path, packages: list[str], env: dict[str, str]) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, platform;"
        f"found = {{p: m.version(p) for p in {packages!r}}};"
        "print(json.dumps({**found, 'python': platform.python_version()}))"
    )
    found: dict[str, str] = json.loads(run_step([python, "-c", code], env={**os.environ, **env}))
    return found


def pinned(directory: Path, pin: str) -> bool:
    stamp = directory / "peers-pin.txt"
    return stamp.exists() and stamp.read_text() == pin


def venv_peer(root: Path, name: str, packages: list[str]) -> Peer:
    """A venv of its own under ``root`` with ``PINS[name]`` (made again when the pin changed)."""
    venv = root / name
    python = venv / "bin" / "python"
    if not pinned(venv, PINS[name]):
        print(f"installing {PINS[name]} into {venv}", file=sys.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        run_step([sys.executable, "-m", "venv", venv])
        run_step([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", PINS[name]])
        (venv / "peers-pin.txt").write_text(PINS[name])
    return Peer(name, python, {}, versions_of(python, packages, {}))


def debian_archive() -> str | None:
    """The URI of the main Debian archive this machine's apt uses (from its sources)."""
    codename = ""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            codename = line.split("=", 1)[1].strip('"')
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:  # deb822 stanzas
        for stanza in path.read_text().split("\n\n"):
            fields = dict(ln.split(":", 1) for ln in stanza.splitlines() if ":" in ln and not ln[0].isspace())
            if codename in fields.get("Suites", "").split() and "URIs" in fields:
                return fields["URIs"].split()[0]
    listing = Path("/etc/apt/sources.list")
    for line in listing.read_text().splitlines() if listing.exists() else []:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "deb" and parts[2] == codename:
            return parts[1]
    return None


def debian_python(directory: Path) -> Path:
    """Debian's python3.13 (of DEBIAN_SUITE) unpacked into ``directory`` with the C library it was
    built against, and a launcher that runs it with that library's loader: apt-get only downloads
    (its lists and cache in ``directory``), nothing is installed on the system."""
    launcher = directory / "python"
    if launcher.exists():
        return launcher
    archive = debian_archive()
    if archive is None or shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise NotInstallable("needs Python >= 3.12: none on PATH, and no Debian apt to take one from")
    apt = directory / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb {archive} {DEBIAN_SUITE} main\n")
    options = [
        f"-oDir::Etc::sourcelist={apt / 'sources.list'}",
        "-oDir::Etc::sourceparts=-",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt / 'cache'}",
        "-oDir::State::status=/dev/null",
        "-oAPT::Sandbox::User=root",
    ]
    print(f"downloading Debian {DEBIAN_SUITE}'s python3.13 into {directory}", file=sys.stderr)
    try:
        run_step(["apt-get", *options, "-qq", "update"])
        run_step(["apt-get", *options, "-qq", "download", *DEBIAN_PACKAGES], cwd=apt / "debs")
    except NotInstallable as exc:
        raise NotInstallable(
            f"needs Python >= 3.12: Debian's python3.13 could not be downloaded ({exc})"
        ) from exc
    tree = directory / "root"
    for deb in sorted((apt / "debs").glob("*.deb")):
        run_step(["dpkg-deb", "-x", deb, tree])
    loaders = sorted(tree.glob("usr/lib/*-linux-gnu*/ld-linux*.so.*"))
    if not loaders:
        raise NotInstallable("needs Python >= 3.12: Debian's libc6 package held no loader")
    lib = loaders[0].parent
    launcher.write_text(
        f'#!/bin/sh\nexec "{loaders[0]}" --library-path "{lib}" "{tree / "usr/bin/python3.13"}" "$@"\n'
    )
    launcher.chmod(0o755)
    return launcher


def newer_python() -> Path | None:
    """A Python >= 3.12 that runs: on PATH, or one of pyenv's versions (not on PATH unless selected)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(f"python3.{minor}") for minor in (14, 13, 12)]
    candidates += [str(p) for p in sorted(pyenv.glob("3.1[2-9]*/bin/python3"), reverse=True)]
    for candidate in filter(None, candidates):
        check = [candidate, "-c", "import sys, venv, ssl; sys.exit(sys.version_info < (3, 12))"]
        if subprocess.run(check, capture_output=True, timeout=60).returncode == 0:
            return Path(candidate)
    return None


def magg_peer(root: Path, choice: str) -> Peer:
    """magg, from a Python >= 3.12: ``choice`` ("auto": one on this machine, else Debian's; "debian";
    or the path of one); in a venv, or Debian's with ``pip --target``."""
    directory = root / "magg"
    found = None if choice == "debian" else newer_python() if choice == "auto" else Path(choice)
    if found is not None:
        python = directory / "venv" / "bin" / "python"
        env: dict[str, str] = {}
        pin = f"{PINS['magg']} {found}"
        if not pinned(directory, pin):
            print(f"installing {PINS['magg']} into {directory / 'venv'} ({found})", file=sys.stderr)
            shutil.rmtree(directory / "venv", ignore_errors=True)
            run_step([found, "-m", "venv", directory / "venv"])
            run_step([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", PINS["magg"]])
    else:
        python = debian_python(directory)
        site = directory / "site"
        env = {"PYTHONPATH": str(site)}
        pin = f"{PINS['magg']} {python}"
        if not pinned(directory, pin):
            print(f"installing {PINS['magg']} into {site}", file=sys.stderr)
            wheels = directory / "wheels"
            pip_wheel = ["download", "-q", "--no-deps", "-d", wheels, PIP_FOR_NEWER_PYTHON]
            run_step([sys.executable, "-m", "pip", *pip_wheel])
            pip = next(wheels.glob("pip-*.whl")) / "pip"
            shutil.rmtree(site, ignore_errors=True)
            run_step(
                [python, pip, "install", "-q", "--root-user-action=ignore", "--target", site, PINS["magg"]]
            )
    (directory / "peers-pin.txt").write_text(pin)
    versions = versions_of(python, ["magg", "fastmcp", "mcp"], env)
    versions["python"] += (
        f" ({found})" if found else f" (Debian {DEBIAN_SUITE}'s python3.13, with its own libc)"
    )
    return Peer("magg", python, env, versions)


def install_peers(root: Path, wanted: set[str], magg_python: str) -> dict[str, Peer]:
    makers: dict[str, Callable[[], Peer]] = {
        "fastmcp": lambda: venv_peer(root, "fastmcp", ["fastmcp", "mcp"]),
        "mcp-proxy": lambda: venv_peer(root, "mcp-proxy", ["mcp-proxy", "mcp"]),
        "magg": lambda: magg_peer(root, magg_python),
    }
    peers: dict[str, Peer] = {}
    for name in sorted(wanted & set(makers)):
        try:
            peers[name] = makers[name]()
        except (NotInstallable, subprocess.TimeoutExpired) as exc:
            peers[name] = Peer(name, problem=f"not installable: {exc}")
    return peers
