"""The Kubernetes manifests (deploy/kubernetes), checked offline: every object against the schemas of
a fixed Kubernetes version (unknown fields rejected), the kustomization listing every file, the
names that must agree (the headless Service, the ConfigMap of shards, the Secrets' keys, the ports
and probes against each shard's metrics address), each shard parsed by the config loader, the key
copy of the pod's command run for real against keys that ``keygen`` made, and the docs naming every
object."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from supervisor.cli.main import build_parser
from supervisor.config.load import parse_config
from supervisor.security.keys import ALLOWED, SERVER, ClientKeys, ServerKeys, keygen
from supervisor.shared.address import parse_address
from supervisor.shared.federation import parse_federation

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
DOCS = ROOT / "docs" / "operations" / "kubernetes.md"
CONTAINERFILE = ROOT / "config" / "container" / "Containerfile"
KUBERNETES_VERSION = "1.31.0"  # the schemas bundled with kubernetes-validate; no network
FRONT_PORT = 5555


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _objects() -> dict[tuple[str, str], dict[str, Any]]:
    objects = {}
    for path in sorted(MANIFESTS.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            for doc in _documents(path):
                objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects


def _one(kind: str) -> dict[str, Any]:
    found = [doc for (k, _), doc in _objects().items() if k == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _named(kind: str, name: str) -> dict[str, Any]:
    objects = _objects()
    assert (kind, name) in objects, f"no {kind} {name}"
    return objects[(kind, name)]


def _container() -> dict[str, Any]:
    containers = _one("StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]  # type: ignore[no-any-return]


def _script() -> str:
    command = _container()["command"]
    assert command[:2] == ["/bin/sh", "-c"] and len(command) == 3
    return command[2]  # type: ignore[no-any-return]


def _shards() -> dict[str, str]:
    return _named("ConfigMap", "mcp-supervisor-shards")["data"]  # type: ignore[no-any-return]


def _namespace() -> str:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    return kustomization["namespace"]  # type: ignore[no-any-return]


OBJECTS = sorted(
    path for path in MANIFESTS.glob("*.yaml") if path.name != "kustomization.yaml"
)  # kustomize's own


@pytest.mark.parametrize("path", OBJECTS, ids=lambda path: path.name)
def test_every_object_is_valid_for_kubernetes_strictly(path: Path) -> None:
    docs = _documents(path)
    assert docs, f"{path} holds no object"
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(part) for part in exc.path)
            pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata']['name']}: at {where}: {exc.message}")


def test_the_kustomization_lists_every_manifest_and_sets_the_namespace() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    files = {path.name for path in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    assert _one("Namespace")["metadata"]["name"] == _namespace()


def test_the_statefulset_is_named_by_a_headless_service_and_a_disruption_budget() -> None:
    sts, service, budget = _one("StatefulSet"), _named("Service", "supervisors"), _one("PodDisruptionBudget")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_image_runs_as_the_containerfiles_user_and_not_as_root() -> None:
    user = re.search(r"^USER (\d+):(\d+)$", CONTAINERFILE.read_text(), re.MULTILINE)
    assert user is not None
    pod = _one("StatefulSet")["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"]) == (int(user[1]), int(user[2]), int(user[2]))
    assert pod["runAsNonRoot"] is True
    container = _container()
    assert container["image"] == "mcp-supervisor:latest" and container["imagePullPolicy"] == "IfNotPresent"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_one_shard_per_pod_each_parsed_by_the_config_loader_without_problems() -> None:
    sts = _one("StatefulSet")
    name, replicas, service = sts["metadata"]["name"], sts["spec"]["replicas"], sts["spec"]["serviceName"]
    shards = _shards()
    assert sorted(shards) == sorted(f"{name}-{n}.json" for n in range(replicas))
    assert '"/config/$HOSTNAME.json"' in _script()  # a pod's hostname is its name: supervisor-N
    mounts = {mount["name"]: mount["mountPath"] for mount in _container()["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in sts["spec"]["template"]["spec"]["volumes"]}
    config = next(key for key, volume in volumes.items() if "configMap" in volume)
    assert mounts[config] == "/config"
    assert volumes[config]["configMap"]["name"] == "mcp-supervisor-shards"
    for filename, text in shards.items():
        parsed = parse_config(text.encode(), path=Path(filename), environ={})
        assert parsed.problems == [], filename
        assert parsed.servers, f"{filename} has no servers"
        for spec in parsed.servers.values():
            assert spec.sandbox is None, f"{filename}: {spec.name} asks for a sandbox"
        pod = filename.removesuffix(".json")
        assert f"{pod}.{service}.{_namespace()}.svc" in parsed.settings.status_hosts, filename


def test_ports_and_probes_match_each_shards_metrics_address_and_the_front_endpoint() -> None:
    container = _container()
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    for filename, text in _shards().items():
        metrics = parse_config(text.encode(), environ={}).settings.metrics
        assert metrics is not None, f"{filename} does not turn the metrics listener on"
        address = parse_address(metrics)
        assert (address.host, address.port) == ("0.0.0.0", ports["metrics"]), filename
    assert ports["front"] == FRONT_PORT
    assert f"--endpoint tcp://0.0.0.0:{FRONT_PORT}" in _script()
    probes = {kind: container[f"{kind}Probe"]["httpGet"] for kind in ("liveness", "readiness", "startup")}
    assert {kind: probe["path"] for kind, probe in probes.items()} == {
        "liveness": "/healthz",
        "readiness": "/readyz",
        "startup": "/healthz",
    }
    assert all(probe["port"] in ("metrics", ports["metrics"]) for probe in probes.values())
    assert all("httpHeaders" not in probe for probe in probes.values())  # Host: the pod's IP, let in
    service_ports = {port["name"]: port for port in _named("Service", "supervisors")["spec"]["ports"]}
    assert (
        service_ports["metrics"]["port"] == ports["metrics"] and service_ports["front"]["port"] == FRONT_PORT
    )


def _secret_volumes() -> dict[str, dict[str, Any]]:
    """mountPath -> the secret volume mounted there."""
    spec = _one("StatefulSet")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in spec["volumes"] if "secret" in volume}
    return {
        m["mountPath"]: volumes[m["name"]]["secret"]
        for m in _container()["volumeMounts"]
        if m["name"] in volumes
    }


def test_the_pods_command_makes_a_key_directory_that_run_keys_accepts(tmp_path: Path) -> None:
    """As the kubelet would: keygen's files in the Secrets' mounts (root's in a cluster, mode 0440),
    then the command's copy; ``ServerKeys.load`` (what ``run --keys`` does) must accept the result."""
    made = tmp_path / "made"
    keygen(made)
    secrets = _secret_volumes()
    assert len(secrets) == 2
    for mount, secret in secrets.items():
        target = tmp_path / mount.lstrip("/")
        target.mkdir(parents=True)
        if "items" in secret:  # the server's pair, from files named as keygen names them
            assert {item["key"] for item in secret["items"]} == {f"{SERVER}.key", f"{SERVER}.key_secret"}
            files = {item["path"]: made / item["key"] for item in secret["items"]}
        else:  # every client key: --from-file= the allowed_clients directory
            files = {path.name: path for path in (made / ALLOWED).iterdir()}
        for name, source in files.items():
            (target / name).write_bytes(source.read_bytes())
            (target / name).chmod(secret["defaultMode"])
    script = _script().replace("/secrets/", f"{tmp_path}/secrets/").replace("/run/", f"{tmp_path}/run/")
    copy = script[: script.index("exec mcp-supervisor")]
    subprocess.run(["/bin/sh", "-c", copy], check=True, timeout=30, env={"PATH": os.environ["PATH"]})
    keys = tmp_path / "run" / "mcp-supervisor" / "keys"
    loaded = ServerKeys.load(keys)
    assert loaded.allowed == keys / ALLOWED and sorted(os.listdir(keys / ALLOWED)) == ["client.key"]
    assert stat.S_IMODE((keys / f"{SERVER}.key_secret").stat().st_mode) == 0o600
    assert '--keys "$keys"' in _script() and "keys=/run/mcp-supervisor/keys" in _script()


def test_the_docs_name_every_object_and_the_secrets_as_made() -> None:
    text = DOCS.read_text()
    for kind, name in _objects():
        assert f"`{name}`" in text, f"docs/operations/kubernetes.md does not name the {kind} {name}"
    for secret in _secret_volumes().values():
        assert f"create secret generic {secret['secretName']} " in text
    assert "--from-file=keys/server.key --from-file=keys/server.key_secret" in text
    assert f"--from-file=keys/{ALLOWED}/" in text
    assert "kubectl apply -k deploy/kubernetes" in text
    for secret in ("mcp-facade-key", "mcp-facade-tokens"):
        assert f"create secret generic {secret} " in text


# ------------------------------------------------------------------ the facade


def _facade() -> dict[str, Any]:
    containers = _named("Deployment", "facade")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]  # type: ignore[no-any-return]


def _facade_argv() -> list[str]:
    command = _facade()["command"]
    assert command[:2] == ["/bin/sh", "-c"] and len(command) == 3
    script = command[2]
    return shlex.split(script[script.index("exec mcp-supervisor") :].replace("\\\n", " "))[2:]


def test_the_facade_federates_one_endpoint_per_supervisor_pod() -> None:
    """The federation file parses, and names supervisor-N of the headless Service for each replica
    (and each shard), on the front port, in order."""
    sts = _one("StatefulSet")
    text = _named("ConfigMap", "mcp-facade-federation")["data"]["federation.json"]
    members = parse_federation(text.encode(), "federation.json")
    replicas = sts["spec"]["replicas"]
    service = sts["spec"]["serviceName"]
    wanted = [f"tcp://{sts['metadata']['name']}-{i}.{service}:{FRONT_PORT}" for i in range(replicas)]
    assert [member.endpoint for member in members] == wanted
    assert len(_shards()) == replicas


def test_the_facades_command_parses_and_its_flags_match_the_pod() -> None:
    args = build_parser().parse_args(_facade_argv())
    assert args.command == "serve" and args.federation == "/federation/federation.json"
    port = {p["name"]: p["containerPort"] for p in _facade()["ports"]}["http"]
    assert args.http == f"0.0.0.0:{port}"
    mounts = {m["name"]: m["mountPath"] for m in _facade()["volumeMounts"]}
    assert args.federation.startswith(mounts["federation"] + "/")
    assert args.token_file.startswith(mounts["tokens"] + "/")
    service = _named("Service", "facade")
    namespace = _namespace()
    assert {f"facade.{namespace}.svc", "facade"} <= set(args.allow_host)
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_the_facade_has_replicas_behind_a_service_with_client_ip_affinity() -> None:
    deployment, service = _named("Deployment", "facade"), _named("Service", "facade")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"].get("clusterIP") != "None" and service["spec"]["sessionAffinity"] == "ClientIP"
    budget = _one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
    assert not budget.items() <= labels.items(), "the supervisors' budget must not count facade pods"
    supervisors = _named("Service", "supervisors")["spec"]["selector"]
    assert not supervisors.items() <= labels.items(), "the headless Service must not name facade pods"


def test_the_facades_command_makes_a_client_key_directory_that_clients_accept(tmp_path: Path) -> None:
    made = tmp_path / "made"
    keygen(made)
    spec = _named("Deployment", "facade")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume["secret"] for volume in spec["volumes"] if "secret" in volume}
    for mount in _facade()["volumeMounts"]:
        secret = volumes.get(mount["name"])
        if secret is None or "items" not in secret:
            continue
        target = tmp_path / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True)
        for item in secret["items"]:
            (target / item["path"]).write_bytes((made / item["key"]).read_bytes())
            (target / item["path"]).chmod(secret["defaultMode"])
    script = (
        _facade()["command"][2]
        .replace("/secrets/", f"{tmp_path}/secrets/")
        .replace("/run/", f"{tmp_path}/run/")
    )
    copy = script[: script.index("exec mcp-supervisor")]
    subprocess.run(["/bin/sh", "-c", copy], check=True, timeout=30, env={"PATH": os.environ["PATH"]})
    loaded = ClientKeys.load(tmp_path / "run" / "mcp-supervisor" / "keys")
    assert loaded.server == ServerKeys.load(made).public and loaded.public == ClientKeys.load(made).public
