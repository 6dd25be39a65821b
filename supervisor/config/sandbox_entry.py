"""A server's ``sandbox`` block: what it may see, reach and use, as written and as checked.

Above: ``supervisor.config.load``, which reads a server's ``sandbox`` (and the default for all, the
top-level ``"supervisor": {"sandbox": ...}``) into a ``SandboxSpec``; the worker confines the server
by it (``workers.sandbox``), and ``status`` shows it (``describe``). Below: nothing but msgspec.

Written::

    "sandbox": {
      "network": false,                        # false: no network at all; true: the host's
      "filesystem": {"read": ["~/notes"], "write": ["/srv/repo"]},
      "memory": "512M", "cpu": 60, "processes": 64, "files": 256
    }

``true`` is every default (no network, no paths beyond the server's own, no limits); ``false`` turns
a default off for one server. A server's block is laid over the default key by key.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

__all__ = ["SandboxConfig", "SandboxSpec", "describe", "parse_memory", "sandbox_spec"]

_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_MEMORY: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", re.IGNORECASE)
MIN_MEMORY: Final = 16 << 20  # bytes: below this nothing starts, so it is a mistake
MIN_FILES: Final = 16  # the sandbox itself and a server's runtime need a few descriptors
NO_ALLOW_LISTS: Final = (
    "network allow lists are not offered: a sandboxed server gets no network (false) or the host's (true)"
)


class FilesystemConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    read: list[str] = []  # paths the server may read (besides the system and its own)
    write: list[str] = []  # paths it may read and write


class SandboxConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A ``sandbox`` object exactly as written (absent keys are None: the default's, or none)."""

    network: bool | list[str] | None = None
    filesystem: FilesystemConfig | None = None
    memory: int | str | None = None  # bytes, or "512M", "1G", "1.5GiB"
    cpu: Any = None  # seconds of CPU time a process of the server may use (checked here)
    processes: Any = None
    files: Any = None


@dataclass(frozen=True)
class SandboxSpec:
    """A server's confinement, checked: ``read``/``write`` are absolute paths (as given, expanded)."""

    network: bool = False
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    memory: int | None = None  # bytes, for all the server's processes together where a cgroup can
    cpu: int | None = None  # seconds of CPU time, per process
    processes: int | None = None  # processes (and threads) at once
    files: int | None = None  # open files per process


def parse_memory(value: int | str) -> int:
    """Bytes from an int or a size with a binary unit ("512M", "1.5 GiB", "2g"); ValueError otherwise."""
    if isinstance(value, int):
        number = value
    else:
        match = _MEMORY.fullmatch(value)
        if match is None:
            raise ValueError(f"memory must be bytes or a size such as '512M' or '2G', got {value!r}")
        number = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if number < MIN_MEMORY:
        raise ValueError(f"memory must be at least {MIN_MEMORY >> 20} MB, got {number} bytes")
    return number


def _count(value: Any, field: str, least: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{field} must be a whole number of at least {least}, got {value!r}")
    return value


def _merged(own: SandboxConfig | bool | None, default: SandboxConfig | bool | None) -> SandboxConfig | None:
    """The server's block laid over the default's, key by key; None when it is not sandboxed."""
    if own is False or (own is None and default in (None, False)):
        return None
    base = default if isinstance(default, SandboxConfig) else SandboxConfig()
    if not isinstance(own, SandboxConfig):
        return base
    given = {name: value for name in own.__struct_fields__ if (value := getattr(own, name)) is not None}
    return msgspec.structs.replace(base, **given)


def sandbox_spec(
    own: SandboxConfig | bool | None,
    default: SandboxConfig | bool | None,
    expand: Callable[[str, str], str],
) -> SandboxSpec | None:
    """A server's ``SandboxSpec`` (None: not sandboxed); ``expand(text, where)`` expands a path's
    variables and ``~``. Raises ValueError naming the field for anything it cannot use."""
    merged = _merged(own, default)
    if merged is None:
        return None
    if isinstance(merged.network, list):
        raise ValueError(f"sandbox.network: {NO_ALLOW_LISTS}")
    paths: dict[str, tuple[str, ...]] = {}
    filesystem = merged.filesystem or FilesystemConfig()
    for kind, given in (("read", filesystem.read), ("write", filesystem.write)):
        expanded = []
        for i, path in enumerate(given):
            where = f"sandbox.filesystem.{kind}[{i}]"
            text = expand(path, where)
            if not text.startswith("/"):
                raise ValueError(f"{where} must be an absolute path (or start with ~), got {text!r}")
            expanded.append(text.rstrip("/") or "/")
        paths[kind] = tuple(expanded)
    try:
        memory = None if merged.memory is None else parse_memory(merged.memory)
    except ValueError as exc:
        raise ValueError(f"sandbox.memory: {exc}") from None
    return SandboxSpec(
        network=bool(merged.network),
        read=paths["read"],
        write=paths["write"],
        memory=memory,
        cpu=_count(merged.cpu, "sandbox.cpu (seconds)", 1),
        processes=_count(merged.processes, "sandbox.processes", 1),
        files=_count(merged.files, "sandbox.files", MIN_FILES),
    )


def megabytes(count: int) -> str:
    """Bytes as the config writes them back: "512 MB" (binary megabytes), "1.5 GB"."""
    if count >= 1 << 30:
        return f"{count / (1 << 30):g} GB"
    return f"{count / (1 << 20):g} MB"


def describe(spec: SandboxSpec | None) -> str:
    """One line for ``status``: "sandboxed: no network; sees the system, its cwd, 1 read, 1 write;
    memory 512 MB, cpu 60 s, processes 64, files 256" (or "not sandboxed")."""
    if spec is None:
        return "not sandboxed"
    listed = (("read", spec.read), ("write", spec.write))
    view = ["the system", "its cwd", *(f"{len(paths)} {kind}" for kind, paths in listed if paths)]
    limits = [
        f"{name} {shown}"
        for name, shown in (
            ("memory", None if spec.memory is None else megabytes(spec.memory)),
            ("cpu", None if spec.cpu is None else f"{spec.cpu} s"),
            ("processes", spec.processes),
            ("files", spec.files),
        )
        if shown is not None
    ]
    parts = ["host network" if spec.network else "no network", "sees " + ", ".join(view)]
    parts.append(", ".join(limits) if limits else "no limits")
    return "sandboxed: " + "; ".join(parts)


def server_sandbox(
    own: SandboxConfig | bool | None,
    default: SandboxConfig | bool | None,
    stdio: bool,
    disabled: bool,
    expand: Callable[[str, str], str],
) -> SandboxSpec | None:
    """A server entry's sandbox: its own block over the default, for a stdio server (a remote one
    runs elsewhere: a block of its own is a mistake, the default does not apply); None when disabled."""
    if disabled:
        return None
    if not stdio:
        if own not in (None, False):
            raise ValueError("sandbox applies to stdio servers; a remote server runs on another machine")
        return None
    return sandbox_spec(own, default, expand)
