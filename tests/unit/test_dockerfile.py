"""The Dockerfile: its production stage gets the runtime requirements alone, as a user not root.

The image itself is built with podman and run by tests/integration/test_image_run.py (`make
image`); these check its shape without building it.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()


def _stages() -> list[list[str]]:
    """Each stage's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    stages: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_two_stages_on_the_slim_python_311_base() -> None:
    stages = _stages()
    assert len(stages) == 2
    # Where a registry can be reached, the slim image pinned by its digest; `make image` passes
    # a base of its own where none can.
    assert re.search(
        r"^ARG PYTHON_IMAGE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}$", DOCKERFILE, re.M
    )
    assert [s[0] for s in stages] == ["FROM ${PYTHON_IMAGE} AS build", "FROM ${PYTHON_IMAGE}"]


def test_the_production_venv_is_installed_from_the_runtime_requirements_alone() -> None:
    named = set(re.findall(r"requirements/[\w.-]+", DOCKERFILE))
    # The build installs the wheels build.sh downloaded with their hashes: no index is reached.
    assert "PIP_NO_INDEX=1" in " ".join(_stages()[0])
    assert named == {"requirements/runtime.txt", "requirements/build.txt"}
    (venv,) = [line for line in _stages()[0] if " venv /opt/venv " in line]
    assert venv.endswith("install.sh venv /opt/venv requirements/runtime.txt")
    # grpcio-tools' venv is the build stage's own; dev.txt appears nowhere.
    (build,) = [line for line in _stages()[0] if " venv /opt/build-venv " in line]
    assert build.endswith("requirements/build.txt")


def test_the_production_stage_copies_only_the_venv_and_the_sources() -> None:
    copies = [line for line in _stages()[1] if line.startswith("COPY")]
    assert copies == [
        "COPY --from=build /opt/venv /opt/venv",
        "COPY --from=build /opt/omnium /opt/omnium",
    ]
    runs = [line for line in _stages()[1] if line.startswith("RUN")]
    assert all("pip" not in run for run in runs)


def test_every_install_step_is_the_shared_script() -> None:
    runs = [line for line in _stages()[0] if line.startswith("RUN")]
    assert runs and all(run.startswith("RUN deploy/image/install.sh ") for run in runs)
    steps = [run.split()[2] for run in runs]
    assert steps == ["venv", "venv", "contracts", "app"]


def test_it_runs_as_a_numeric_user_that_is_not_root() -> None:
    (user,) = [line for line in _stages()[1] if line.startswith("USER")]
    uid = user.split()[1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_the_build_context_leaves_out_dev_files() -> None:
    allowed = [
        line[1:]
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    assert "requirements/dev.txt" not in allowed
    assert not any(path.startswith(("tests", ".venv", "bench")) for path in allowed)
