"""What a VS Code ``mcp.json`` says beyond ``${VAR}``: ``${env:NAME}``, ``${input:ID}`` answered from an
``inputs`` list, ``${workspaceFolder}``, ``${userHome}``, and ``envFile``.

Above: ``supervisor.config.load``, which expands every string of a server entry through ``Variables`` and
reads each entry's ``envFile`` with ``read_env_file``. Below: the environment and the files named.

The supervisor runs unattended, so an input VS Code would prompt for is answered from
``$MCP_SUPERVISOR_INPUT_<ID>`` (the id upper-cased, every other character than a letter or digit an
underscore), or from the file ``$CREDENTIALS_DIRECTORY/<id>`` (systemd's credentials, one value a file,
its last newline dropped); with neither, the server's entry is refused with a message naming the input
and where its answer may come from. Messages name variables, inputs and files, never their values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

__all__ = ["INPUT_ENV_PREFIX", "InputSpec", "Unanswered", "Variables", "input_env", "parse_inputs"]
__all__ += ["read_env_file", "workspace_of"]

INPUT_ENV_PREFIX: Final = "MCP_SUPERVISOR_INPUT_"
CREDENTIALS_ENV: Final = "CREDENTIALS_DIRECTORY"  # where systemd puts a unit's LoadCredential= files
MAX_ENV_FILE: Final = 1 << 20  # bytes of an envFile read at most


class Unanswered(Exception):
    """A variable or input with no value here; the text says which, and how to give one."""


class InputSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of VS Code's ``inputs`` list (only what the supervisor needs of it)."""

    id: str
    type: str = "promptString"
    description: str = ""
    password: bool = False


def parse_inputs(raw: msgspec.Raw | None) -> dict[str, InputSpec]:
    """The ``inputs`` list by id; ``ValueError`` saying what is wrong with it."""
    if raw is None:
        return {}
    try:
        entries = msgspec.json.decode(raw, type=list[InputSpec])
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ValueError(f'"inputs" must be a list of objects with an "id": {exc}') from None
    return {entry.id: entry for entry in entries}


def input_env(id: str) -> str:
    """The environment variable that answers the input ``id``."""
    return INPUT_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", id).upper()


@dataclass(frozen=True, slots=True)
class Variables:
    """VS Code's variables, as one config file sees them."""

    environ: Mapping[str, str]
    inputs: Mapping[str, InputSpec]
    workspace: Path | None  # the folder the config belongs to (``.vscode/mcp.json``: its parent)
    home: Path

    def value(self, kind: str, name: str) -> str:
        """``${env:NAME}``, ``${input:ID}``, or a predefined ``${NAME}``; ``Unanswered`` without one."""
        if kind == "env":
            value = self.environ.get(name)
            if value is None:
                raise Unanswered(f"${{env:{name}}}: variable {name} is not set")
            return value
        if kind == "input":
            return self._answer(name)
        if name == "workspaceFolder" and self.workspace is not None:
            return str(self.workspace)
        if name == "userHome":
            return str(self.home)
        raise Unanswered(f"${{{name}}}: not set")

    def _answer(self, id: str) -> str:
        spec = self.inputs.get(id)
        if spec is None:
            known = ", ".join(sorted(self.inputs)) or "none"
            raise Unanswered(
                f'${{input:{id}}}: no input {id!r} in the config\'s "inputs" list (inputs: {known})'
            )
        variable = input_env(id)
        value = self.environ.get(variable)
        if value is not None:
            return value
        credentials = self.environ.get(CREDENTIALS_ENV)
        if credentials:
            try:
                return (Path(credentials) / id).read_text().removesuffix("\n")
            except (OSError, UnicodeDecodeError):
                pass
        about = f" ({spec.description})" if spec.description else ""
        raise Unanswered(
            f"input {id!r}{about} has no answer: the supervisor runs unattended and prompts nobody; "
            f"set {variable}, or put it in the file $CREDENTIALS_DIRECTORY/{id}"
        )


def workspace_of(config: Path | None) -> Path | None:
    """The workspace folder of a config file: the parent of its ``.vscode`` folder, else its folder."""
    if config is None:
        return None
    folder = config.resolve().parent
    return folder.parent if folder.name == ".vscode" else folder


def read_env_file(path: Path) -> dict[str, str]:
    """A dotenv file: ``KEY=VALUE`` lines (``export`` allowed, ``#`` comments, one pair of quotes
    stripped); ``Unanswered`` naming the file and line when it cannot be read or a line is not that."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_ENV_FILE + 1)
    except OSError as exc:
        raise Unanswered(f"envFile {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_ENV_FILE:
        raise Unanswered(f"envFile {path}: larger than {MAX_ENV_FILE} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unanswered(f"envFile {path}: not UTF-8 text") from None
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise Unanswered(f"envFile {path}: line {number} is not NAME=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key] = value
    return env
