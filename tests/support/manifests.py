"""deploy/kubernetes/ as data: its documents, and the environment each container starts with."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                yield path.name, document


DOCUMENTS = list(documents())


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in DOCUMENTS if d["kind"] == kind}


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
