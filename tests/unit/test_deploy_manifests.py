"""deploy/kubernetes/ against the Kubernetes API schemas and against omnium's own settings.

No cluster runs here: these are schema and consistency checks, not a deployment.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import kubernetes_validate
import pytest

import omnium_admin as admin
import omnium_delivery as delivery
import omnium_gateway as gateway
import omnium_imports as imports
from omnium_delivery import check_client
from omnium_grpc import Callers
from omnium_settings import Settings, describe_settings
from tests.support.manifests import DEPLOYMENTS, DOCUMENTS, OVERLAYS, RENDERED, VERSION
from tests.support.manifests import containers as _containers
from tests.support.manifests import environment as _environment
from tests.support.manifests import example_secrets as _example_secrets
from tests.support.manifests import of_kind as _of_kind
from tests.support.manifests import render as _render

# The oldest Kubernetes the manifests are meant for, and the newest whose schemas are shipped.
KUBERNETES_VERSIONS = ("1.31.0", kubernetes_validate.latest_version() + ".0")

# Priorities: scoring, command and the gateway before delivery before imports.
FIRST = ("omnium-scoring", "omnium-command", "omnium-gateway")
SECOND = ("omnium-delivery",)
LAST = ("omnium-imports",)

PREFIX = "OMNIUM_"
SETTINGS = {name for name, _, _ in describe_settings()}
DNS_TARGET = re.compile(
    r"^dns:///(?P<service>[a-z0-9-]+)\.\$\(POD_NAMESPACE\)\.svc\.cluster\.local:(?P<port>\d+)$"
)


def _cpu(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_the_manifests_are_there() -> None:
    kinds = sorted({d["kind"] for _, d in DOCUMENTS})
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Job",
        "PodDisruptionBudget",
        "PriorityClass",
        "Secret",
        "Service",
    ]
    services = ["admin", "command", "delivery", "gateway", "imports", "scoring"]
    assert sorted(DEPLOYMENTS) == [f"omnium-{s}" for s in services]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_runs_the_image_of_the_version_it_was_rendered_with(overlay: str) -> None:
    namespaces = {"dev": "omnium-dev", "staging": "omnium-staging", "production": "omnium"}
    images = {
        container["image"]
        for document in RENDERED[overlay]
        if document["kind"] == "Deployment"
        for container in document["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"omnium:{VERSION}"}
    assert {d["metadata"].get("namespace") for d in RENDERED[overlay]} == {namespaces[overlay]}
    assert sorted(
        d["metadata"]["name"] for d in RENDERED[overlay] if d["kind"] == "Deployment"
    ) == (sorted(DEPLOYMENTS))


@pytest.mark.parametrize("version", ["latest", ""])
def test_render_refuses_a_release_without_its_version(version: str) -> None:
    done = _render("production", version)
    assert done.returncode == 2 and "never" in done.stderr and done.stdout == ""


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    ("file", "document"),
    DOCUMENTS,
    ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in DOCUMENTS],
)
def test_every_manifest_passes_the_kubernetes_schema(
    file: str, document: dict[str, Any], version: str
) -> None:
    # Strict: a misspelt or misplaced field fails instead of being dropped by the API server.
    kubernetes_validate.validate(document, version, strict=True)


def test_the_schema_check_refuses_a_broken_deployment() -> None:
    """The validator is real: a misplaced field and a wrong type are each refused."""
    deployment = copy.deepcopy(DEPLOYMENTS["omnium-command"])
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 30
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)
    deployment = copy.deepcopy(DEPLOYMENTS["omnium-command"])
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def test_every_omnium_variable_the_manifests_set_is_a_setting() -> None:
    unknown = [
        f"{deployment}: {item['name']}"
        for deployment, container in _containers()
        for item in container.get("env", [])
        if item["name"].startswith(PREFIX) and item["name"] not in SETTINGS
    ]
    assert unknown == []


@pytest.mark.parametrize(("deployment", "container"), list(_containers()), ids=list(DEPLOYMENTS))
def test_each_containers_settings_load(deployment: str, container: dict[str, Any]) -> None:
    """What the pod would start with (example secrets) passes Settings.from_env, types and all."""
    settings = Settings.from_env(_environment(container))
    assert settings.server.bind_host == "0.0.0.0"
    assert settings.server.database_url is not None


def test_each_calling_process_sends_a_token_of_its_own_caller_with_the_right_role() -> None:
    """Every gRPC server takes the same callers; each process that calls another sends the
    token of its own caller, whose role allows what that process calls (docs/callers.md)."""
    envs = {name: _environment(container) for name, container in _containers()}
    servers = {
        name: env["OMNIUM_GRPC_CALLERS"]
        for name, env in envs.items()
        if "OMNIUM_GRPC_CALLERS" in env
    }
    assert set(servers) == {"omnium-command", "omnium-imports", "omnium-scoring", "omnium-delivery"}
    assert len(set(servers.values())) == 1
    callers = Callers.parse(next(iter(servers.values())).split(","))
    sent = {}
    for name, env in envs.items():
        if "OMNIUM_GRPC_TOKEN" in env:
            caller = callers.identify((("authorization", f"Bearer {env['OMNIUM_GRPC_TOKEN']}"),))
            assert not isinstance(caller, str), f"{name}: {caller}"
            sent[name] = (caller.name, caller.role.name)
    assert sent == {
        "omnium-admin": ("admin-console", "operator-console"),
        "omnium-gateway": ("gateway", "scorer-console"),
        "omnium-imports": ("imports", "service"),
        "omnium-scoring": ("scoring", "service"),
    }


def test_the_release_migrates_in_a_job_of_its_own_with_settings_that_load() -> None:
    """The one migration command, from the same image, its limits real settings; no
    Deployment migrates (they only check the schema)."""
    jobs = _of_kind("Job")
    assert list(jobs) == ["omnium-migrate"]
    spec = jobs["omnium-migrate"]["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["command"] == ["python", "-m", "omnium_db", "migrate"]
    assert container["image"].split(":")[0] == "omnium"
    env = _environment(container)
    assert {n for n in env if n.startswith(PREFIX)} <= SETTINGS
    database = Settings.from_env(env).database
    assert database.migrate_lock_timeout_seconds == 2.0
    assert database.migrate_lock_tries == 30
    for _, deployment in _containers():
        assert "omnium_db" not in deployment["command"]


def test_the_image_is_the_one_the_dockerfile_builds() -> None:
    for _, container in _containers():
        assert container["image"].split(":")[0] == "omnium"
        assert container["command"][:2] == ["python", "-m"]


def test_scoring_command_and_the_gateway_come_first_then_delivery_then_imports() -> None:
    classes = {name: d["value"] for name, d in _of_kind("PriorityClass").items()}
    priority = {
        name: classes[d["spec"]["template"]["spec"]["priorityClassName"]]
        for name, d in DEPLOYMENTS.items()
    }
    assert min(priority[n] for n in FIRST) > max(priority[n] for n in SECOND)
    assert min(priority[n] for n in SECOND) > max(priority[n] for n in LAST)
    assert not any(d.get("globalDefault") for d in _of_kind("PriorityClass").values())


def test_cpu_requests_follow_the_same_order() -> None:
    cpu = {
        name: sum(
            _cpu(c["resources"]["requests"]["cpu"])
            for c in d["spec"]["template"]["spec"]["containers"]
        )
        for name, d in DEPLOYMENTS.items()
    }
    assert min(cpu[n] for n in FIRST) > max(cpu[n] for n in SECOND)
    assert min(cpu[n] for n in SECOND) > max(cpu[n] for n in LAST)


def test_every_deployment_has_a_disruption_budget_that_keeps_one_copy() -> None:
    budgets = _of_kind("PodDisruptionBudget")
    for name, deployment in DEPLOYMENTS.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        matching = [
            b
            for b in budgets.values()
            if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(matching) == 1, name
        assert matching[0]["spec"]["minAvailable"] == 1
        assert deployment["spec"]["replicas"] >= 2, name


def test_releases_roll_one_copy_at_a_time() -> None:
    for name, deployment in DEPLOYMENTS.items():
        strategy = deployment["spec"]["strategy"]
        assert strategy["type"] == "RollingUpdate", name
        assert strategy["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}, name


def test_each_copy_serves_metrics_on_the_port_its_pod_declares() -> None:
    """The container's metrics port is the one its settings serve /metrics on, and the pod's
    scrape annotations point at it."""
    for name, container in _containers():
        settings = Settings.from_env(_environment(container))
        service = name.removeprefix("omnium-")
        served = settings.value(f"{service}_metrics_port")
        declared = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert declared.get("metrics") == served, name
        annotations = DEPLOYMENTS[name]["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", name
        assert annotations["prometheus.io/port"] == str(served), name


def test_copies_spread_across_zones_and_nodes() -> None:
    for name, deployment in DEPLOYMENTS.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        keys = {c["topologyKey"]: c for c in spread}
        assert set(keys) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}, name
        assert keys["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "DoNotSchedule", name
        for constraint in spread:
            assert constraint["maxSkew"] == 1
            assert constraint["labelSelector"]["matchLabels"].items() <= labels.items(), name


def _stop_budget(deployment: str, settings: Settings) -> float:
    """The longest a copy takes from SIGTERM to its exit, phase by phase as its stop() runs."""
    if deployment == "omnium-gateway":
        # The parent kills a worker still there after its grace and a second to close.
        return settings.gateway.stop_grace_seconds + gateway.CLOSE_SECONDS
    if deployment == "omnium-imports":
        # The batches' grace and the jobs' hand-over, beside the gRPC drain; then the doorbell
        # closes (aiohttp waits half the grace, cancels, and waits the other half).
        jobs = settings.imports.stop_grace_seconds + imports.HAND_OVER_SECONDS
        return max(settings.grpc.grace_seconds, jobs) + settings.server.http_grace_seconds
    if deployment == "omnium-delivery":
        # The clients not sent to go at once, the sends in flight get their grace, and the
        # clients of those cut go after them; beside the gRPC drain.
        sends = 2 * delivery.HAND_OVER_SECONDS + settings.delivery.stop_grace_seconds
        return max(settings.grpc.grace_seconds, sends)
    if deployment == "omnium-admin":
        # The pages in flight, on an open port; then one that came late, twice over.
        return settings.server.http_grace_seconds + 2 * admin.CLOSE_SECONDS
    return settings.grpc.grace_seconds  # command and scoring: the gRPC drain


def _late_stops() -> list[str]:
    """Each container whose preStop and stop budget do not end before its SIGKILL."""
    late = []
    for name, deployment in DEPLOYMENTS.items():
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"]:
            command = container["lifecycle"]["preStop"]["exec"]["command"]
            assert command[0] == "sleep", name
            pre_stop = float(command[1])
            assert pre_stop > 0, name
            # What the manifest sets, and the setting's own default for what it does not.
            settings = Settings.from_env(_environment(container))
            budget = pre_stop + _stop_budget(name, settings)
            # Pools and channels close after the budget: a second of room at least.
            if budget + 1 > pod["terminationGracePeriodSeconds"]:
                late.append(f"{name}: {budget:g} s of {pod['terminationGracePeriodSeconds']} s")
    return late


def test_a_stopping_copy_drains_before_it_is_killed() -> None:
    """preStop, then the whole stop of each copy, end before Kubernetes sends SIGKILL."""
    assert _late_stops() == []


GRACES = {
    "omnium-command": "OMNIUM_GRPC_GRACE_SECONDS",
    "omnium-scoring": "OMNIUM_GRPC_GRACE_SECONDS",
    "omnium-gateway": "OMNIUM_GATEWAY_STOP_GRACE_SECONDS",
    "omnium-imports": "OMNIUM_IMPORTS_STOP_GRACE_SECONDS",
    "omnium-delivery": "OMNIUM_DELIVERY_STOP_GRACE_SECONDS",
    "omnium-admin": "OMNIUM_HTTP_GRACE_SECONDS",
}


@pytest.mark.parametrize(("deployment", "variable"), GRACES.items())
def test_a_grace_raised_past_the_pods_is_caught(
    deployment: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above reads the real settings: a grace set to the pod's whole
    terminationGracePeriodSeconds in the manifest fails it."""
    raised = copy.deepcopy(DEPLOYMENTS[deployment])
    pod = raised["spec"]["template"]["spec"]
    env = [e for e in pod["containers"][0]["env"] if e["name"] != variable]
    env.append({"name": variable, "value": str(pod["terminationGracePeriodSeconds"])})
    pod["containers"][0]["env"] = env
    monkeypatch.setitem(DEPLOYMENTS, deployment, raised)
    assert [late.split(":")[0] for late in _late_stops()] == [deployment]


def test_every_dns_address_names_a_headless_service_and_its_port() -> None:
    services = _of_kind("Service")
    seen = 0
    for name, container in _containers():
        for item in container.get("env", []):
            if not item.get("value", "").startswith("dns:///"):
                continue
            match = DNS_TARGET.match(item["value"])
            assert match, f"{name}: {item['name']}={item['value']}"
            service = services[match["service"]]
            assert service["spec"]["clusterIP"] == "None"
            assert service["spec"].get("publishNotReadyAddresses", False) is False
            assert int(match["port"]) in [p["port"] for p in service["spec"]["ports"]]
            target = [
                d
                for d in DEPLOYMENTS.values()
                if service["spec"]["selector"].items()
                <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert len(target) == 1
            seen += 1
    # Scoring, imports and admin reach command; admin reaches imports; the gateway, scoring.
    assert seen == 5


def test_every_secret_and_config_map_read_has_an_example() -> None:
    secrets = _example_secrets()
    config_maps = _of_kind("ConfigMap")
    for name, deployment in DEPLOYMENTS.items():
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"]:
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert (ref["name"], ref["key"]) in secrets, f"{name}: {ref}"
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, name
            if "secret" in volume:
                assert volume["secret"]["secretName"] in _of_kind("Secret"), name
    for (_, key), value in secrets.items():
        assert "EXAMPLE" in value or ".example" in value, f"{key} does not look fake"


def test_the_example_clients_file_is_one_delivery_loads() -> None:
    clients_file = _of_kind("ConfigMap")["omnium-delivery-clients"]
    config = json.loads(clients_file["data"]["clients.json"])
    checked = [check_client(client) for client in config["clients"]]
    assert [c["code"] for c in checked] == ["news18", "dailyhunt"]
    (delivery,) = (c for n, c in _containers() if n == "omnium-delivery")
    mounts = {m["name"]: m["mountPath"] for m in delivery["volumeMounts"]}
    assert (
        _environment(delivery)["OMNIUM_DELIVERY_CLIENTS_FILE"]
        == mounts["clients"] + "/clients.json"
    )
    assert config["clients"][0]["sftp"]["client_key"].startswith(mounts["keys"] + "/")
