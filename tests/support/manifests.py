"""deploy/kubernetes/ as data: each overlay as kustomize renders it, the files applied on their
own, and the environment each container starts with."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
OVERLAYS = ("dev", "staging", "production")
# The version the overlays are rendered with here; a release passes its own.
VERSION = "0.0.0-manifests-test"


def render(overlay: str, version: str = VERSION) -> subprocess.CompletedProcess[str]:
    """deploy/kubernetes/render.sh: the overlay through kustomize, with the image's tag."""
    return subprocess.run(
        ["bash", str(KUBERNETES / "render.sh"), overlay, version],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def rendered(overlay: str, version: str = VERSION) -> list[dict[str, Any]]:
    done = render(overlay, version)
    assert done.returncode == 0, f"render.sh {overlay}: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def standalone() -> Iterator[tuple[str, dict[str, Any]]]:
    """The files beside the overlays: the cluster-wide PriorityClasses and the examples."""
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                yield path.name, document


RENDERED = {overlay: rendered(overlay) for overlay in OVERLAYS}
# Every document a cluster gets, each overlay's own, for the schema checks.
DOCUMENTS = list(standalone()) + [
    (f"overlays/{overlay}", document)
    for overlay, documents in RENDERED.items()
    for document in documents
]
# What production applies: the consistency checks read these.
PRODUCTION = list(standalone()) + [("overlays/production", d) for d in RENDERED["production"]]


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in PRODUCTION if d["kind"] == kind}


DEPLOYMENTS = of_kind("Deployment")


def containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, deployment in DEPLOYMENTS.items():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            yield name, container


def example_secrets() -> dict[tuple[str, str], str]:
    return {
        (name, key): value
        for name, secret in of_kind("Secret").items()
        for key, value in secret["stringData"].items()
    }


def environment(
    container: dict[str, Any], secrets: Mapping[tuple[str, str], str] | None = None
) -> dict[str, str]:
    """The container's environment as the pod would see it; secrets from the examples unless
    given."""
    secrets = example_secrets() if secrets is None else secrets
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            # Kubernetes expands $(VAR) from the variables listed before this one.
            env[item["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), item["value"]
            )
        elif "secretKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[(ref["name"], ref["key"])]
        elif item["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[item["name"]] = "omnium"
    return env
