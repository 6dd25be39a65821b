"""The public API: what ``supervisor`` and ``supervisor.client`` export, that it is what the README, the
documentation and the examples import, and that importing it stays cheap."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import supervisor
import supervisor.client
from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.aio_events import AsyncEventWatch, AsyncToolCache
from supervisor.client.aio_federated import AsyncFederatedClient
from supervisor.client.blocking import SupervisorClient
from supervisor.client.federated import FederatedClient
from supervisor.client.tool_cache import ToolCache
from supervisor.client.watch import EventWatch

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = ("supervisor", "supervisor.client", "supervisor.adapters", "supervisor.adapters.langchain")


@pytest.mark.parametrize("module", [supervisor, supervisor.client], ids=lambda module: module.__name__)
def test_every_exported_name_resolves(module: types.ModuleType) -> None:
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))


def test_the_package_exports_what_the_client_library_does() -> None:
    assert supervisor.__all__ == supervisor.client.__all__
    for name in supervisor.__all__:
        assert getattr(supervisor, name) is getattr(supervisor.client, name), name


@pytest.mark.parametrize("path", ["supervisor/__init__.py", "supervisor/client/__init__.py"])
def test_type_checkers_see_every_exported_name(path: str) -> None:
    """The ``TYPE_CHECKING`` imports name exactly ``__all__`` (what mypy and pyright read)."""
    tree = ast.parse((ROOT / path).read_text())
    (block,) = [node for node in tree.body if isinstance(node, ast.If)]
    imported = {alias.name for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert imported == set(
        importlib.import_module(path.removesuffix("/__init__.py").replace("/", ".")).__all__
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        supervisor.Nothing  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        supervisor.client.Nothing  # noqa: B018


def _project_types(annotation: object) -> set[type]:
    """The project's classes an annotation names, through unions, generics and aliases."""
    found = (
        {annotation}
        if isinstance(annotation, type) and annotation.__module__.startswith("supervisor")
        else set()
    )
    for argument in typing.get_args(annotation):
        found |= _project_types(argument)
    return found


@pytest.mark.parametrize(
    "cls",
    [
        SupervisorClient,
        AsyncSupervisorClient,
        EventWatch,
        AsyncEventWatch,
        ToolCache,
        AsyncToolCache,
        FederatedClient,
        AsyncFederatedClient,
    ],
)
def test_every_type_a_public_method_takes_or_returns_is_exported(cls: type) -> None:
    exported = {id(getattr(supervisor.client, name)) for name in supervisor.client.__all__}
    for name, member in inspect.getmembers(cls, callable):
        if name.startswith("_") and name != "__init__":
            continue
        for kind in typing.get_type_hints(member).values():
            for named in _project_types(kind):
                assert id(named) in exported, f"{cls.__name__}.{name} names {named}, which is not exported"


# ------------------------------------------------------- what the README and the docs import

_FENCE = re.compile(r"^```(?:python|py)\s*\n(.*?)^```", re.DOTALL | re.MULTILINE)
_IMPORT = re.compile(r"^\s*from\s+(supervisor[\w.]*)\s+import\s+(\([^)]*\)|[^\n]*)", re.MULTILINE)


def _python_texts() -> list[tuple[str, str]]:
    texts = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if page.exists():
            texts += [(str(page.relative_to(ROOT)), block) for block in _FENCE.findall(page.read_text())]
    texts += [
        (str(path.relative_to(ROOT)), path.read_text()) for path in sorted((ROOT / "examples").glob("*.py"))
    ]
    return texts


def _taught_imports() -> list[tuple[str, str, str]]:
    """``(where, module, name)`` for each ``from supervisor... import name`` the pages and examples teach."""
    found = []
    for where, text in _python_texts():
        for module, names in _IMPORT.findall(text):
            names = re.sub(r"#[^\n]*", "", names).strip("()")
            for name in names.split(","):
                if name.strip():
                    found.append((where, module, name.split(" as ")[0].strip()))
    return found


def test_the_readme_the_docs_and_the_examples_import_only_the_public_api() -> None:
    taught = _taught_imports()
    assert any(module == "supervisor" for _, module, _ in taught)  # the parsing finds them
    wrong = []
    for where, module, name in taught:
        if module not in PUBLIC_MODULES:
            wrong.append(f"{where}: from {module} import {name} (not a public module)")
        elif name not in importlib.import_module(module).__all__:
            wrong.append(f"{where}: from {module} import {name} (not in its __all__)")
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------- what importing loads


def _loaded_after(script: str) -> set[str]:
    code = f"import sys; before = set(sys.modules); {script}; print('\\n'.join(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return {name.split(".")[0] for name in out.stdout.split()} | set(out.stdout.split())


def test_importing_the_package_loads_no_zeromq_msgspec_anyio_or_trio() -> None:
    loaded = _loaded_after("import supervisor")
    assert not loaded & {"zmq", "msgspec", "anyio", "trio", "supervisor.client"}


def test_the_blocking_client_loads_no_anyio() -> None:
    loaded = _loaded_after("import supervisor.client; supervisor.client.SupervisorClient")
    assert "supervisor.client.blocking" in loaded
    assert "anyio" not in loaded
    assert "supervisor.client.aio" not in loaded


def test_the_blocking_client_from_the_package_loads_the_blocking_stub_alone() -> None:
    loaded = _loaded_after("from supervisor import SupervisorClient, SupervisorError, ToolResult")
    assert "supervisor.client.blocking" in loaded
    assert not loaded & {"anyio", "supervisor.client.aio", "supervisor.client.aio_events"}


def test_the_blocking_federated_client_loads_no_anyio() -> None:
    loaded = _loaded_after("from supervisor import FederatedClient, Listing, members")
    assert "supervisor.client.federated" in loaded
    assert not loaded & {"anyio", "supervisor.client.aio", "supervisor.client.aio_federated"}


def test_the_async_client_loads_anyio() -> None:
    loaded = _loaded_after("from supervisor import AsyncSupervisorClient")
    assert {"anyio", "supervisor.client.aio"} <= loaded
