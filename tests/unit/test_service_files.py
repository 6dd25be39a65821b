"""The files that run the supervisor as a service: the systemd units (config/systemd) and the container
file (config/container/Containerfile), checked against the real command line and the code's paths.

``systemd-analyze verify`` checks the units where systemd is installed. The container image cannot be
built here (no container registry is reachable), so its file is checked as text: the base image,
the arguments it runs the command with, the paths it copies.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.cli.main import build_parser
from supervisor.config.load import parse_config
from supervisor.config.model import SupervisorSettings
from supervisor.config.restart_policy import RestartPolicy
from supervisor.ops.service import READY_MARGIN
from supervisor.security.tokens import state_dir
from supervisor.shared.paths import ipc_path, resolve_endpoint, runtime_dir

ROOT = Path(__file__).resolve().parent.parent.parent
SYSTEM_UNIT = ROOT / "config" / "systemd" / "mcp-supervisor.service"
USER_UNIT = ROOT / "config" / "systemd" / "user" / "mcp-supervisor.service"
HTTP_UNIT = ROOT / "config" / "systemd" / "mcp-supervisor-http.service"
CONTAINERFILE = ROOT / "config" / "container" / "Containerfile"
STOP_MARGIN = 15.0  # seconds a stop takes past shutdownGrace: every worker and server stopped, bounded


def unit(path: Path) -> dict[str, list[str]]:
    """``Section.Key`` -> every value it is given, in order (systemd's syntax: comments, repeats)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, value = line.split("=", 1)
        settings.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return settings


def one(settings: dict[str, list[str]], key: str) -> str:
    (value,) = settings[key]
    return value


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", value)
    assert match, f"not a plain time span: {value}"
    return int(match.group(1)) * (60 if match.group(2) == "min" else 1)


@pytest.mark.parametrize("path", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_units_are_notify_services_with_a_watchdog_that_drain_on_stop(path: Path) -> None:
    settings = unit(path)
    assert one(settings, "Service.Type") == "notify"
    assert one(settings, "Service.NotifyAccess") == "main"
    assert seconds(one(settings, "Service.WatchdogSec")) == 30
    assert one(settings, "Service.Restart") == "on-failure"
    assert one(settings, "Service.ExecReload") == "/bin/kill -HUP $MAINPID"
    # SIGTERM to the supervisor alone, which stops its own workers after draining; time enough for both.
    assert one(settings, "Service.KillMode") == "mixed"
    assert (
        seconds(one(settings, "Service.TimeoutStopSec")) > SupervisorSettings().shutdown_grace + STOP_MARGIN
    )
    # READY waits at most the longest startTimeout (the default here) and a margin.
    assert seconds(one(settings, "Service.TimeoutStartSec")) > RestartPolicy().start_timeout + READY_MARGIN


@pytest.mark.parametrize("path", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_exec_start_is_accepted_by_the_real_command_line(path: Path) -> None:
    program, *args = shlex.split(one(unit(path), "Service.ExecStart"))
    assert program.endswith("/mcp-supervisor")
    parsed = build_parser().parse_args(args)
    assert parsed.command == "run"
    assert parsed.config.endswith("/mcp-supervisor/mcp.json")


def test_the_system_unit_gives_the_supervisor_the_directories_it_uses() -> None:
    settings = unit(SYSTEM_UNIT)
    specifiers = {"%t": "/run", "%S": "/var/lib", "%C": "/var/cache"}  # a system unit's
    env = {}
    for assignment in settings["Service.Environment"]:
        name, value = assignment.split("=", 1)
        for specifier, directory in specifiers.items():
            value = value.replace(specifier, directory)
        env[name] = value
    runtime = Path("/run") / one(settings, "Service.RuntimeDirectory")
    assert runtime_dir(env) == runtime  # the workers' socket goes there
    endpoint = resolve_endpoint(None, env)
    assert ipc_path(endpoint) == runtime / "supervisor.sock"
    assert one(settings, "Service.RuntimeDirectoryMode") == "0700"  # the supervisor wants it private
    state = Path("/var/lib") / one(settings, "Service.StateDirectory")
    assert state_dir(env) == state  # OAuth tokens
    assert env["HOME"] == str(state)
    assert one(settings, "Service.User") != "root"
    assert one(settings, "Service.NoNewPrivileges") == "yes"
    assert one(settings, "Service.ProtectSystem") == "strict"  # writable: only the directories above


@pytest.mark.parametrize("path", [SYSTEM_UNIT, USER_UNIT, HTTP_UNIT], ids=["system", "user", "http"])
def test_units_raise_the_descriptor_limit_above_the_default_1024(path: Path) -> None:
    assert int(one(unit(path), "Service.LimitNOFILE")) >= 65536


def test_the_http_unit_serves_the_supervisors_registry_and_drains_on_stop() -> None:
    from supervisor.facade.run import DRAIN_GRACE

    settings = unit(HTTP_UNIT)
    program, *args = shlex.split(one(settings, "Service.ExecStart"))
    assert program == shlex.split(one(unit(SYSTEM_UNIT), "Service.ExecStart"))[0]
    parsed = build_parser().parse_args(args)
    assert parsed.command == "serve" and parsed.http.startswith("127.0.0.1:") and parsed.token_file
    assert "mcp-supervisor.service" in one(settings, "Unit.After")
    assert one(settings, "Service.KillSignal") == "SIGTERM"
    assert seconds(one(settings, "Service.TimeoutStopSec")) > DRAIN_GRACE
    environment = dict(value.split("=", 1) for value in settings["Service.Environment"])
    supervisor_env = dict(value.split("=", 1) for value in unit(SYSTEM_UNIT)["Service.Environment"])
    assert environment["MCP_SUPERVISOR_ENDPOINT"] == supervisor_env["MCP_SUPERVISOR_ENDPOINT"]
    assert one(settings, "Service.User") == one(unit(SYSTEM_UNIT), "Service.User")


@pytest.mark.parametrize("path", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_units_show_how_a_server_gets_a_secret_as_a_systemd_credential(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    [(name, source)] = re.findall(r"^#LoadCredential=([^:\s]+):(\S+)$", text, re.MULTILINE)
    assert source.startswith("/etc/mcp-supervisor/" if path == SYSTEM_UNIT else "%h/.config/mcp-supervisor/")
    [entry] = re.findall(r'^#\s+("env": \{.*\})$', text, re.MULTILINE)
    credentials = tmp_path / "credentials"  # what systemd makes of LoadCredential=NAME:PATH
    credentials.mkdir()
    (credentials / name).write_text("the-token\n")
    server = {"command": "github-mcp-server"} | json.loads("{" + entry + "}")
    data = json.dumps({"mcpServers": {"github": server}}).encode()
    config = parse_config(data, environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    assert config.problems == []
    assert config.servers["github"].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "the-token"}


def test_the_http_unit_shows_how_its_tokens_come_as_a_systemd_credential() -> None:
    text = HTTP_UNIT.read_text()
    [(name, source)] = re.findall(r"^#LoadCredential=([^:\s]+):(\S+)$", text, re.MULTILINE)
    [command] = re.findall(r"^#ExecStart=(.*)$", text, re.MULTILINE)
    program, *args = shlex.split(command)
    assert program == shlex.split(one(unit(HTTP_UNIT), "Service.ExecStart"))[0]
    parsed = build_parser().parse_args(args)
    assert parsed.token_file == f"${{CREDENTIALS_DIRECTORY}}/{name}"
    assert source == shlex.split(one(unit(HTTP_UNIT), "Service.ExecStart"))[-1]  # the same tokens file


def with_credentials(text: str) -> str:
    """A unit with its commented-out credential lines in use (a commented ``ExecStart=`` replaces its own)."""
    if "\n#ExecStart=" in text:
        text = re.sub(r"^ExecStart=.*\n", "", text, count=1, flags=re.MULTILINE)
    return re.sub(r"^#(LoadCredential|ExecStart)=", r"\1=", text, flags=re.MULTILINE)


@pytest.mark.parametrize("credentials", [False, True], ids=["as-is", "credentials"])
@pytest.mark.parametrize("path", [SYSTEM_UNIT, USER_UNIT, HTTP_UNIT], ids=["system", "user", "http"])
def test_systemd_analyze_verifies_the_units(path: Path, credentials: bool, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    program = Path(sys.executable).parent / "mcp-supervisor"  # this checkout's, installed editable
    assert program.exists()
    text = with_credentials(path.read_text()) if credentials else path.read_text()
    if credentials:
        assert "\nLoadCredential=" in text and "\n#LoadCredential=" not in text
    text = re.sub(r"^ExecStart=\S+", f"ExecStart={program}", text, flags=re.MULTILINE)
    copy = tmp_path / path.name
    copy.write_text(text)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    user = ["--user"] if path == USER_UNIT else []
    verified = subprocess.run(
        [analyze, *user, "verify", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
    )
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr.strip() == "", verified.stderr


# ------------------------------------------------------------------ the container file


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments left out."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, arguments = line.partition(" ")
        found.append((keyword.upper(), arguments.strip()))
    return found


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), arguments
    return value


def test_the_container_runs_the_real_command_line_on_the_mounted_config() -> None:
    found = instructions(CONTAINERFILE)
    entrypoint = exec_form(next(args for name, args in found if name == "ENTRYPOINT"))
    cmd = exec_form(next(args for name, args in found if name == "CMD"))
    program, *args = entrypoint + cmd
    assert program == "mcp-supervisor"  # the console script of [project.scripts]
    parsed = build_parser().parse_args(args)
    assert parsed.command == "run"
    assert parsed.config == "/config/mcp.json"
    volumes = [exec_form(args) for name, args in found if name == "VOLUME"]
    assert any("/config" in volume for volume in volumes)
    health = next(args for name, args in found if name == "HEALTHCHECK")
    check = exec_form(health.split(" CMD ", 1)[1])
    assert check[0] == "mcp-supervisor"
    assert build_parser().parse_args(check[1:]).command in ("status", "wait")
    assert ("STOPSIGNAL", "SIGTERM") in found


def test_the_container_is_an_official_slim_python_of_a_supported_version_run_by_no_root() -> None:
    found = instructions(CONTAINERFILE)
    for name, args in found:
        if name == "FROM":
            match = re.fullmatch(r"python:3\.(\d+)-slim(-\w+)?( AS \w+)?", args)
            assert match and int(match.group(1)) >= 11, args
    users = [args for name, args in found if name == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


def test_the_container_copies_paths_that_exist_and_the_build_context_keeps() -> None:
    found = instructions(CONTAINERFILE)
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = 0
    for name, args in found:
        if name == "COPY" and not args.startswith("--from"):
            *sources, _destination = args.split()
            for source in sources:
                assert (ROOT / source).exists(), source
                assert source.rstrip("/") in kept, f"{source} is left out of the build context"
                copied += 1
    assert copied >= 3
    # The build reads these: the package's sources and its metadata's files.
    assert {"pyproject.toml", "README.md", "LICENSE", "supervisor", "workers"} <= kept


def test_the_container_runtime_directory_and_endpoint_agree() -> None:
    env: dict[str, str] = {}
    for name, args in instructions(CONTAINERFILE):
        if name == "ENV":
            env |= dict(item.split("=", 1) for item in shlex.split(args))
    endpoint = resolve_endpoint(None, env)
    path = ipc_path(endpoint)
    assert path is not None
    assert path.parent == runtime_dir(env)  # the workers' socket beside the front one, one private dir
    assert state_dir(env) == Path(env["HOME"])
