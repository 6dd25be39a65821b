"""What a config string becomes: ``${VAR}`` and ``${VAR:-default}``, VS Code's variables, ``~``, and
secrets read from files: ``${file:PATH}`` and ``${credential:NAME}`` (systemd's credentials).

Above: ``supervisor.config.load``, which expands every string of a server entry with
:func:`expand_vars` and checks its headers with :func:`header_problem`. Below: the environment, VS
Code's variables (``supervisor.config.vscode``) and the files named.

A file's value is its text with one trailing newline (``\\n`` or ``\\r\\n``) dropped, and is never
expanded again. Messages name the variable or the file, the path opened and why it could not be
read ("no such file", "permission denied", ...), never what a file holds; a header's check names the
header, never its value.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from supervisor.config.model import ConfigError, MissingVariable
from supervisor.config.vscode import CREDENTIALS_ENV, Variables

__all__ = ["MAX_SECRET_FILE", "SecretError", "expand_tilde", "expand_vars", "header_problem", "home_of"]

MAX_SECRET_FILE: Final = 1 << 20  # bytes a ${file:} or ${credential:} reads at most (1 MiB)

_VAR_RE = re.compile(r"\$\{(?:(env|input):([A-Za-z0-9_.-]+)|([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?)\}")
_PREDEFINED = frozenset({"workspaceFolder", "userHome"})  # VS Code's, when the environment has no such name
_SECRET_RE = re.compile(r"\$\{(file|credential):(?!-)")  # ${file:-x} is the variable "file", default x
_DIRECTIVES = "LoadCredential=, LoadCredentialEncrypted= or SetCredential="
_REASONS: Final = {
    errno.ENOENT: "no such file",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.ELOOP: "too many levels of symbolic links",
    errno.ENAMETOOLONG: "the path is too long",
}
_NOT_IN_HEADER = re.compile(r"[^\t\x20-\x7e]")  # what no HTTP header value holds (httpx sends ASCII)


class SecretError(ConfigError):
    """A ``${file:}`` or ``${credential:}`` without a value; the text names it, the path and why."""


class _Unreadable(Exception):
    """Internal: why a file gave no value."""


def home_of(environ: Mapping[str, str]) -> Path:
    """``$HOME``, else the account's home directory."""
    home = environ.get("HOME")
    return Path(home) if home else Path.home()


def expand_tilde(text: str, home: Callable[[], Path]) -> str:
    """``~`` or ``~/...`` at the start of ``text`` as the home directory (``home()``)."""
    if text == "~" or text.startswith("~/"):
        return str(home()) + text[1:]
    return text


def expand_vars(
    text: str, environ: Mapping[str, str], variables: Variables | None = None, *, folder: Path | None = None
) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}`` (default also when VAR is empty) and, with
    ``variables``, VS Code's ``${env:NAME}``, ``${input:ID}``, ``${workspaceFolder}`` and ``${userHome}``;
    anything else, e.g. a lone ``$`` or an unclosed ``${``, stays. Raises :class:`MissingVariable` for
    unset ``${VAR}``, ``Unanswered`` for a VS Code variable without a value.

    ``${file:PATH}`` is what the file at PATH holds, ``${credential:NAME}`` what the file NAME in
    ``$CREDENTIALS_DIRECTORY`` holds, one trailing newline dropped. PATH and NAME may use the variables
    above; ``~`` starts the home directory; a relative PATH is read from ``folder`` (the config file's),
    else from the current directory. Raises :class:`SecretError` when there is no such value."""
    parts: list[str] = []
    at = 0
    while (match := _SECRET_RE.search(text, at)) is not None:
        end = _closing(text, match.end())
        if end < 0:
            raise SecretError(f"{text[match.start() :]}: no closing }}")
        parts.append(_plain(text[at : match.start()], environ, variables))
        ref = text[match.start() : end + 1]
        parts.append(_secret(match.group(1), text[match.end() : end], ref, environ, variables, folder))
        at = end + 1
    parts.append(_plain(text[at:], environ, variables))
    return "".join(parts)


def header_problem(headers: Mapping[str, str]) -> str | None:
    """Why one of these header values cannot be sent (the header named, never its value), else None.

    httpx would refuse such a value on every request with an error that quotes it."""
    for name, value in headers.items():
        bad = _NOT_IN_HEADER.search(value)
        if bad is not None:
            char = bad.group()
            if char in "\r\n":
                what = "a line break"
            elif char.isascii():
                what = "a control character"
            else:
                what = "a character that is not ASCII"
            return f"headers.{name}: the value holds {what}, which no HTTP header can"
        if value != value.strip(" \t"):
            return f"headers.{name}: the value starts or ends with a space or tab, which no HTTP header can"
    return None


def _plain(text: str, environ: Mapping[str, str], variables: Variables | None) -> str:
    """``text`` (no ``${file:}`` in it) with its variables expanded."""

    def substitute(match: re.Match[str]) -> str:
        kind, special, name, default = match.groups()
        if kind is not None:
            if variables is None:
                return match.group(0)
            return variables.value(kind, special)
        value = environ.get(name)
        if value is None and default is None and variables is not None and name in _PREDEFINED:
            return variables.value("", name)
        if default is not None:
            return value or default
        if value is None:
            raise MissingVariable(name)
        return value

    return _VAR_RE.sub(substitute, text)


def _closing(text: str, start: int) -> int:
    """The index of the ``}`` that closes a reference whose inside starts at ``start``, else -1."""
    depth, i = 0, start
    while i < len(text):
        if text.startswith("${", i):
            depth, i = depth + 1, i + 2
            continue
        if text[i] == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return -1


def _secret(
    kind: str,
    inside: str,
    ref: str,
    environ: Mapping[str, str],
    variables: Variables | None,
    folder: Path | None,
) -> str:
    """The value of ``${file:inside}`` or ``${credential:inside}`` (written ``ref``)."""
    if _SECRET_RE.search(inside):
        raise SecretError(f"{ref}: a path cannot hold another ${{file:}} or ${{credential:}}")
    written = _plain(inside, environ, variables)
    hint = ""
    if kind == "credential":
        path = _credential(written, ref, environ)
        hint = f" (does the service load it? LoadCredential={written}:PATH)"
    elif not written:
        raise SecretError(f"{ref}: no path")
    else:
        path = Path(expand_tilde(written, lambda: home_of(environ)))
    if not path.is_absolute() and folder is not None:
        path = folder / path
    try:
        return _read(path)
    except _Unreadable as exc:
        reason = str(exc) + (hint if str(exc) == _REASONS[errno.ENOENT] else "")
        raise SecretError(f"{ref}: {path}: {reason}") from None


def _credential(name: str, ref: str, environ: Mapping[str, str]) -> Path:
    """Where the credential ``name`` is: ``$CREDENTIALS_DIRECTORY/name``."""
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise SecretError(f'{ref}: {name!r} is not a credential name: a file name, no "/", not "." or ".."')
    directory = environ.get(CREDENTIALS_ENV)
    if not directory:
        raise SecretError(
            f"{ref}: ${CREDENTIALS_ENV} is not set: systemd sets it for a service that has "
            f"{_DIRECTIVES} (e.g. LoadCredential={name}:/etc/mcp-supervisor/credentials/{name})"
        )
    return Path(directory) / name


def _read(path: Path) -> str:
    """A small regular file's UTF-8 text, one trailing newline dropped; ``_Unreadable`` saying why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)  # a FIFO never blocks
    except OSError as exc:
        raise _Unreadable(_REASONS.get(exc.errno or 0, (exc.strerror or str(exc)).lower())) from None
    except ValueError:
        raise _Unreadable("the path holds a NUL character") from None
    chunks: list[bytes] = []
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise _Unreadable("is a directory")
        if not stat.S_ISREG(mode):
            raise _Unreadable("not a regular file (a pipe, socket or device)")
        size = 0
        while size <= MAX_SECRET_FILE:
            chunk = os.read(fd, MAX_SECRET_FILE + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _Unreadable(_REASONS.get(exc.errno or 0, (exc.strerror or str(exc)).lower())) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_SECRET_FILE:
        raise _Unreadable(f"larger than {MAX_SECRET_FILE} bytes (1 MiB), the most a secret file may hold")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Unreadable("not UTF-8 text") from None
    if "\0" in text:
        raise _Unreadable("holds a NUL character, which no environment variable, argument or header can")
    return text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
