"""requirements/*.txt: every pin hashed, one version per package, and the image's file lean."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements"
FILES = ("runtime.txt", "build.txt", "dev.txt")
# Tools that must never reach the production image.
DEV_TOOLS = ("pytest", "mypy", "ruff", "playwright", "schemathesis", "hypothesis")


def _entries(name: str) -> dict[str, tuple[str, list[str]]]:
    """{package: (version, hashes)} of one compiled file."""
    text = (REQUIREMENTS / name).read_text().replace("\\\n", " ")
    entries = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        pinned = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", spec.strip())
        assert pinned, f"{name}: {spec!r} is not pinned with =="
        hashes = [o.split("=", 1)[1] for o in options if o.startswith("hash=")]
        entries[canonicalize_name(pinned[1])] = (pinned[2], hashes)
    return entries


def _pyproject() -> dict[str, list[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {
        "runtime.txt": project["dependencies"],
        **{f"{extra}.txt": deps for extra, deps in project["optional-dependencies"].items()},
    }


@pytest.mark.parametrize("name", FILES)
def test_every_pin_is_exact_and_hashed(name: str) -> None:
    entries = _entries(name)
    assert entries
    for package, (_, hashes) in entries.items():
        assert hashes and all(h.startswith("sha256:") for h in hashes), package


def test_a_package_in_two_files_has_one_version() -> None:
    versions: dict[str, set[str]] = {}
    for name in FILES:
        for package, (version, _) in _entries(name).items():
            versions.setdefault(package, set()).add(version)
    assert {p: v for p, v in versions.items() if len(v) > 1} == {}


def test_pyproject_pins_are_the_compiled_ones() -> None:
    for name, dependencies in _pyproject().items():
        entries = _entries(name)
        for dependency in dependencies:
            requirement = Requirement(dependency)
            (pin,) = requirement.specifier
            assert entries[canonicalize_name(requirement.name)][0] == pin.version, dependency


def test_the_runtime_file_has_no_dev_or_build_tools() -> None:
    runtime = _entries("runtime.txt")
    assert [tool for tool in (*DEV_TOOLS, "grpcio-tools") if tool in runtime] == []
    assert "grpcio-tools" in _entries("build.txt")
