"""Production mode: what the manifests start with passes `check --deploy`, every dev default is
named on a line of its own, and a process in production refuses to start with any of them."""

from __future__ import annotations

import hashlib
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from omnium_settings import Settings, deploy_problems
from tests.support.manifests import DEPLOYMENTS, containers, environment, example_secrets

REPO = Path(__file__).resolve().parents[2]


def _real_looking() -> dict[tuple[str, str], str]:
    """The example Secrets with every EXAMPLE-... value made at random, the same value wherever
    the same example stands (a caller's token in the callers list and in its process)."""
    made: dict[str, str] = {}

    def real(match: re.Match[str]) -> str:
        return made.setdefault(match.group(0), secrets.token_hex(32))

    made_up = {
        key: re.sub(r"EXAMPLE-[A-Za-z0-9-]+", real, value)
        for key, value in example_secrets().items()
    }
    # As the example's comment asks: the servers are given each caller's hash, not its token.
    callers = made_up[("omnium", "grpc-callers")].split(",")
    made_up[("omnium", "grpc-callers")] = ",".join(
        f"{name}:{role}:sha256={hashlib.sha256(token.encode()).hexdigest()}"
        for name, role, token in (item.split(":", 2) for item in callers)
    )
    return made_up


REAL = _real_looking()


def _pod_environment(container: dict[str, Any]) -> dict[str, str]:
    return environment(container, REAL)


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m omnium_process check --deploy` with only `env` as OMNIUM_ settings."""
    return subprocess.run(
        [sys.executable, "-m", "omnium_process", "check", "--deploy"],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(("deployment", "container"), list(containers()), ids=list(DEPLOYMENTS))
def test_check_deploy_finds_no_problem_in_what_each_manifest_starts(
    deployment: str, container: dict[str, Any]
) -> None:
    done = _check_deploy(_pod_environment(container))
    assert done.returncode == 0, f"{deployment}:\n{done.stdout}{done.stderr}"
    assert done.stdout.strip().endswith("no problems")


def _scoring() -> dict[str, str]:
    (container,) = DEPLOYMENTS["omnium-scoring"]["spec"]["template"]["spec"]["containers"]
    return _pod_environment(container)


def _without_tls(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("OMNIUM_GRPC_TLS_")}


def _with_provider_key(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "providers"
    folder.mkdir()
    (folder / "feed.toml").write_text(
        'code = "feed"\nname = "Feed"\nformat = "odf"\nmode = "push"\nevent = "AG2026"\n'
        'api_key = "a-key-anyone-reading-the-image-can-use"\n'
    )
    return {"OMNIUM_SCORING_PROVIDERS_DIR": str(folder)}


# (what is changed, the words its line must have)
DEV_DEFAULTS = {
    "gRPC auth off": ({"OMNIUM_GRPC_AUTH_REQUIRED": "false"}, "OMNIUM_GRPC_AUTH_REQUIRED"),
    "console sign-in off": (
        {"OMNIUM_ADMIN_SIGN_IN_REQUIRED": "false"},
        "OMNIUM_ADMIN_SIGN_IN_REQUIRED",
    ),
    "cookie without Secure": (
        {"OMNIUM_SESSION_COOKIE_SECURE": "false"},
        "OMNIUM_SESSION_COOKIE_SECURE",
    ),
    "an example token": ({"OMNIUM_GRPC_TOKEN": "EXAMPLE-scoring-token"}, "example value"),
    "a short token": ({"OMNIUM_GRPC_TOKEN": "letmein"}, "has 7 characters"),
    "an example database password": (
        {"OMNIUM_DATABASE_URL": "postgresql://omnium:EXAMPLE-not-a-password@db:5432/omnium"},
        "OMNIUM_DATABASE_URL has an example password",
    ),
    "traces in clear": (
        {
            "OMNIUM_TELEMETRY_EXPORTER": "otlp",
            "OMNIUM_OTLP_ENDPOINT": "http://otel.monitoring:4317",
        },
        "OMNIUM_OTLP_ENDPOINT",
    ),
    "outbound calls to the metadata service": (
        {"OMNIUM_OUTBOUND_ALLOWED_NETWORKS": "10.20.0.0/16,169.254.169.254"},
        "OMNIUM_OUTBOUND_ALLOWED_NETWORKS has 169.254.169.254",
    ),
    "outbound calls anywhere": (
        {"OMNIUM_OUTBOUND_ALLOWED_NETWORKS": "0.0.0.0/0"},
        "OMNIUM_OUTBOUND_ALLOWED_NETWORKS has 0.0.0.0/0",
    ),
    "metrics on the public port": (
        {"OMNIUM_GATEWAY_PUBLIC_METRICS": "true"},
        "OMNIUM_GATEWAY_PUBLIC_METRICS is true",
    ),
    "forwarded headers from anywhere": (
        {"OMNIUM_TRUSTED_PROXIES": "10.0.0.0/8,0.0.0.0/0"},
        "OMNIUM_TRUSTED_PROXIES has 0.0.0.0/0",
    ),
}


@pytest.mark.parametrize(("change", "words"), DEV_DEFAULTS.values(), ids=list(DEV_DEFAULTS))
def test_each_dev_default_is_named_on_a_line_of_its_own(change: dict[str, str], words: str) -> None:
    assert deploy_problems(Settings.from_env(_scoring())) == []
    problems = deploy_problems(Settings.from_env({**_scoring(), **change}))
    assert len(problems) == 1, problems
    assert words in problems[0]


def test_the_dev_environment_is_named_and_so_is_the_cookie_it_leaves_without_secure() -> None:
    problems = deploy_problems(
        Settings.from_env({**_scoring(), "OMNIUM_ENVIRONMENT": "development"})
    )
    assert len(problems) == 2, problems
    assert problems[0].startswith("OMNIUM_ENVIRONMENT is development")
    assert problems[1].startswith("OMNIUM_SESSION_COOKIE_SECURE is false")


def test_grpc_without_tls_is_named_for_serving_and_for_calling() -> None:
    problems = deploy_problems(Settings.from_env(_without_tls(_scoring())))
    assert len(problems) == 2
    assert "OMNIUM_GRPC_TLS_CERT_FILE" in problems[0]
    assert "OMNIUM_GRPC_TLS_CA_FILE" in problems[1]


def test_a_mesh_that_gives_mutual_tls_stands_in_for_the_tls_files() -> None:
    env = {**_without_tls(_scoring()), "OMNIUM_GRPC_MESH": "true"}
    assert deploy_problems(Settings.from_env(env)) == []


def test_a_collector_on_this_host_may_take_traces_in_clear() -> None:
    env = {
        **_scoring(),
        "OMNIUM_TELEMETRY_EXPORTER": "otlp",
        "OMNIUM_OTLP_ENDPOINT": "http://127.0.0.1:4317",
    }
    assert deploy_problems(Settings.from_env(env)) == []


def test_a_provider_key_written_in_a_file_is_named(tmp_path: Path) -> None:
    env = {**_scoring(), **_with_provider_key(tmp_path)}
    (problem,) = deploy_problems(Settings.from_env(env))
    assert "feed.toml: api_key is written in the file" in problem
    assert "api_key_sha256" in problem


def test_check_deploy_exits_1_and_lists_every_problem(tmp_path: Path) -> None:
    env = {
        **_without_tls(_scoring()),
        "OMNIUM_GRPC_AUTH_REQUIRED": "false",
        **_with_provider_key(tmp_path),
    }
    done = _check_deploy(env)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len([line for line in lines if line.startswith("problem: ")]) == 4
    assert lines[-1] == "check --deploy: 4 problem(s)"


@pytest.mark.parametrize("module", ["omnium_command", "omnium_scoring", "omnium_gateway"])
def test_a_process_in_production_refuses_to_start_with_a_dev_default(
    module: str, tmp_path: Path
) -> None:
    # Nothing is listening at the database's address: the process must stop before it connects.
    env = {
        **_without_tls(_scoring()),
        "OMNIUM_DATABASE_URL": f"postgresql://omnium:{secrets.token_hex(16)}@127.0.0.1:9/omnium",
        "OMNIUM_REDIS_URL": "redis://127.0.0.1:9/0",
    }
    done = subprocess.run(
        [sys.executable, "-m", module],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    refusals = [
        line for line in done.stderr.splitlines() if "refuses to start in production" in line
    ]
    assert len(refusals) == 2, done.stderr
    assert "check --deploy" in done.stderr.splitlines()[-1]


def test_the_image_runs_in_production_mode() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    final_stage = dockerfile.rsplit("\nFROM ", 1)[1]
    assert re.search(r"^\s+OMNIUM_ENVIRONMENT=production\b", final_stage, re.M)
