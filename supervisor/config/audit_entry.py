"""The ``"audit"`` setting of the top-level ``"supervisor"`` object: where the audit trail is written and
how it is rotated, as written in the file (``AuditConfig``) and as the supervisor runs it (``AuditSpec``).

Above: ``supervisor.config.load``, which checks the setting with the rest of the file
(``check_audit``), and ``supervisor.daemon.lifecycle``, which resolves it for the endpoint the
supervisor serves (``audit_spec``): the default file is named after that endpoint. Below: msgspec, and
the state directory's rule (``supervisor.security.tokens.state_dir``).

``"audit": false`` turns the trail off; absent or ``true``, it is on with every default; an object sets
``path`` (absolute, ``~`` allowed), ``maxBytes`` (an int, or a string with a ``K``, ``M`` or ``G``
suffix: powers of 1024) and ``keep`` (rotated files kept).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

import msgspec

from supervisor.security.tokens import state_dir

__all__ = ["DEFAULT_KEEP", "DEFAULT_MAX_BYTES", "AuditConfig", "AuditSpec", "audit_spec", "check_audit"]
__all__ += ["instance_name", "parse_size"]

DEFAULT_MAX_BYTES: Final = 10 * 1024 * 1024  # a file is rotated before it grows past this
DEFAULT_KEEP: Final = 5  # rotated files kept: x.jsonl.1 (newest) ... x.jsonl.5
MIN_MAX_BYTES: Final = 1024  # a smaller bound would rotate at almost every line
MAX_KEEP: Final = 1000
_SIZE = re.compile(r"\s*(\d+)\s*([KMG]?)i?B?\s*", re.IGNORECASE)
_UNITS: Final = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


class AuditConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """``"audit"`` as written; absent fields take the defaults."""

    path: str | None = None  # absent: $XDG_STATE_HOME/mcp-supervisor/audit/<instance>.jsonl
    max_bytes: int | str = DEFAULT_MAX_BYTES
    keep: Annotated[int, msgspec.Meta(ge=0, le=MAX_KEEP)] = DEFAULT_KEEP


@dataclass(frozen=True)
class AuditSpec:
    """The trail as the supervisor writes it: the file, its bound, and the rotated files kept."""

    path: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    keep: int = DEFAULT_KEEP


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string like ``"10M"``, ``"512K"``, ``"1G"`` (powers of 1024), ``"4096"``;
    ``ValueError`` naming what is wrong for anything else, or for less than ``MIN_MAX_BYTES``."""
    if isinstance(value, bool):
        raise ValueError(f'maxBytes must be a number of bytes or a size like "10M", not {value!r}')
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.fullmatch(value)
        if match is None:
            raise ValueError(f'maxBytes must be a number of bytes or a size like "10M", not {value!r}')
        size = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if size < MIN_MAX_BYTES:
        raise ValueError(f"maxBytes must be at least {MIN_MAX_BYTES} bytes, not {size}")
    return size


def check_audit(entry: AuditConfig | bool | None) -> None:
    """``ValueError`` naming the field when the setting cannot be used (the path is checked when it is
    given, not whether it can be written: the supervisor says that while it runs)."""
    if not isinstance(entry, AuditConfig):
        return
    parse_size(entry.max_bytes)
    if entry.path is not None:
        _given_path(entry.path)


def _given_path(text: str) -> Path:
    path = Path(text).expanduser()
    if not text or not path.is_absolute():
        raise ValueError(f"path must be an absolute path (or start with ~), not {text!r}")
    return path


def instance_name(endpoint: str, runtime: Path | None = None) -> str:
    """The name of the supervisor serving ``endpoint``, for files of its own: an ``ipc://`` socket in
    the runtime directory ``runtime`` by its file name (``supervisor.sock`` -> ``supervisor``), any
    other endpoint spelled out, every run of characters but letters, digits, ``-`` and ``.`` made one
    ``-`` (``tcp://0.0.0.0:5555`` -> ``tcp-0.0.0.0-5555``)."""
    if endpoint.startswith("ipc://"):
        path = Path(endpoint[len("ipc://") :])
        if runtime is not None and path.parent == runtime:
            return path.name.removesuffix(".sock") or "supervisor"
    spelled = "".join(c if c.isalnum() or c in "-." else "-" for c in endpoint)
    name = re.sub("-+", "-", spelled).strip("-.") or "supervisor"
    return name[-120:]


def audit_spec(
    entry: AuditConfig | bool | None,
    instance: str,
    environ: Mapping[str, str] | None = None,
) -> AuditSpec | None:
    """The trail for the supervisor named ``instance`` (``instance_name``); None when it is off."""
    if entry is False:
        return None
    env = os.environ if environ is None else environ
    if not isinstance(entry, AuditConfig):
        entry = AuditConfig()
    default = state_dir(env) / "audit" / f"{instance}.jsonl"
    path = default if entry.path is None else _given_path(entry.path)
    return AuditSpec(path=path, max_bytes=parse_size(entry.max_bytes), keep=entry.keep)
