"""Which modules a module loads: the wire format and the client stay light for agents."""

from __future__ import annotations

import subprocess
import sys


def _loaded_by(module: str) -> set[str]:
    """Every module a fresh interpreter has loaded after importing ``module`` (and not before)."""
    script = (
        "import sys; before = set(sys.modules); "
        f"import {module}; "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(out.stdout.split())


def test_the_protocol_package_loads_nothing_of_the_project_but_itself() -> None:
    loaded = _loaded_by("supervisor.protocol")
    project = {name for name in loaded if name.split(".")[0] in ("supervisor", "workers")}
    assert project == {
        name for name in project if name == "supervisor" or name.startswith("supervisor.protocol")
    }
    assert "msgspec" in loaded


def test_the_protocol_package_needs_nothing_beyond_the_standard_library_and_msgspec() -> None:
    beyond_msgspec = _loaded_by("supervisor.protocol") - _loaded_by("msgspec")
    stdlib = set(sys.stdlib_module_names)
    assert {name.split(".")[0] for name in beyond_msgspec} - stdlib == {"supervisor"}


def test_importing_the_client_loads_no_config_parsing_and_no_worker_code() -> None:
    loaded = _loaded_by("supervisor.client.blocking")
    assert "supervisor.config.load" not in loaded
    assert not any(name.split(".")[0] == "workers" for name in loaded)


def test_the_command_line_parses_its_arguments_without_the_client_the_sdk_or_trio() -> None:
    """``mcp`` (which a host starts, and waits for) loads only what its first answer needs; the
    other commands load their own modules when they run."""
    script = (
        "import sys; before = set(sys.modules); "
        "from supervisor.cli.main import build_parser; build_parser().parse_args(['mcp']); "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(out.stdout.split())
    heavy = {
        "zmq",
        "trio",
        "anyio",
        "msgspec",
        "mcp",
        "mcp_types",
        "pydantic",
        "httpx2",
        "starlette",
        "uvicorn",
    }
    assert not {name.split(".")[0] for name in loaded} & heavy
    assert not loaded & {
        "supervisor.client.blocking",
        "supervisor.cli.registry_commands",
        "supervisor.cli.watch_commands",
        "supervisor.cli.control_commands",
        "supervisor.cli.keygen",
        "supervisor.cli.login",
        "supervisor.protocol",
    }


def test_a_supervisor_without_a_metrics_listener_loads_no_http_stack_and_no_asyncio() -> None:
    """The status page's HTTP stack and prometheus_client load only with a metrics listener, and the
    CURVE gate's authenticator (which brings asyncio) only with CURVE: a plain supervisor stays small."""
    loaded = _loaded_by("supervisor.daemon.lifecycle")
    assert "supervisor.daemon.core" in loaded  # the check sees the daemon itself
    tops = {name.split(".")[0] for name in loaded}
    assert not tops & {
        "asyncio",
        "prometheus_client",
        "h11",
        "wsgiref",
        "mcp",
        "pydantic",
        "difflib",
        "jsonschema",
    }
    assert not {name for name in loaded if name.startswith("supervisor.ops.web")}


def test_the_client_stubs_load_no_asyncio() -> None:
    for module in ("supervisor.client.blocking", "supervisor.client.aio"):
        loaded = _loaded_by(module)
        assert "supervisor.security.curve" in loaded, module  # the handshake watch is loaded
        assert "asyncio" not in {name.split(".")[0] for name in loaded}, module


def test_the_workers_own_zmtp_dealer_loads_no_zeromq() -> None:
    """A worker on an ipc link speaks ZMTP itself: the codec and the DEALER need no libzmq."""
    loaded = _loaded_by("supervisor.shared.zmtp_dealer")
    assert "supervisor.shared.zmtp" in loaded and "trio" in loaded
    assert "zmq" not in {name.split(".")[0] for name in loaded}


SDK_STACK = {"mcp", "mcp_types", "pydantic", "pydantic_core", "anyio", "httpx2", "httpcore2", "h11"}


def _loaded_by_script(script: str) -> set[str]:
    """Every module a fresh interpreter has loaded after running ``script`` (and not before)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; before = set(sys.modules)\n{script}\n"
            "print('\\n'.join(sorted(set(sys.modules) - before)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(out.stdout.split())


def test_a_stdio_worker_and_its_zygote_load_no_mcp_sdk_pydantic_anyio_http_client_or_zmq() -> None:
    """The stdio zygote's preload and everything a stdio worker imports: the worker speaks MCP itself
    (``workers.lean``), so a fork copies none of the SDK's pages."""
    loaded = _loaded_by_script("import workers.zygote as z; z.preload(z.PRELOAD); import workers.worker")
    assert "workers.lean" in loaded and "trio" in loaded
    assert not {name.split(".")[0] for name in loaded} & {*SDK_STACK, "zmq"}


def test_a_stdio_worker_and_its_zygote_load_no_jsonschema_until_an_instance_is_not_proved() -> None:
    """The stdio zygote's preload and warm-up, and a stdio worker: arguments are proved valid by
    ``supervisor.shared.instance_quick``; ``jsonschema`` (and what it loads) is a worker's own
    import, for a schema or an instance that is not proved."""
    loaded = _loaded_by_script(
        "import workers.zygote as z; z.preload(z.PRELOAD); z.warm(); import workers.worker"
    )
    assert "workers.calls" in loaded and "supervisor.shared.instance_quick" in loaded
    assert not {name.split(".")[0] for name in loaded} & {"jsonschema", "referencing", "rpds"}


def test_the_remote_zygote_preloads_the_sdks_client_stack() -> None:
    loaded = _loaded_by_script("import workers.zygote as z; z.preload(z.REMOTE_PRELOAD)")
    assert {"mcp", "mcp_types", "pydantic", "anyio", "httpx2", "jsonschema"} <= {
        name.split(".")[0] for name in loaded
    }
