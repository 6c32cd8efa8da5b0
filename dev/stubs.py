"""`make stubs`: omnium's Python gRPC stubs as one wheel another team installs.

The wheel, `omnium-grpc-stubs`, holds what `make contracts` generates from protos/ (the
messages, the service stubs and their type hints), versioned by protos/VERSION. It needs the
protobuf and grpcio runtimes the stubs were generated for, or newer within their major version.

    python -m dev.stubs [--out DIR]     # prints the wheel's path
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import __version__ as PROTOBUF_VERSION
from grpc import __version__ as GRPC_VERSION

REPO = Path(__file__).resolve().parents[1]
CONTRACT = REPO / "libs" / "omnium_contract"
VERSION_FILE = REPO / "protos" / "VERSION"
NAME = "omnium-grpc-stubs"

_PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "Python gRPC stubs for omnium's services (command, imports, scoring, delivery)."
requires-python = ">=3.11"
dependencies = ["protobuf>={protobuf},<{protobuf_next}", "grpcio>={grpc},<{grpc_next}"]

[tool.setuptools.packages.find]
include = ["omnium*"]

[tool.setuptools.package-data]
"*" = ["*.pyi", "py.typed"]
"""


def version() -> str:
    """The protos' version: what the wheel is called, and what a team pins."""
    text = VERSION_FILE.read_text().strip()
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise SystemExit(f"{VERSION_FILE} says {text!r}; write a version like 1.2.0")
    return text


def build(out: Path) -> Path:
    """Build the wheel from the generated contract into `out`; its path."""
    if not (CONTRACT / "omnium").is_dir():
        raise SystemExit("the contract is not generated: run `make contracts` first")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp)
        shutil.copytree(
            CONTRACT / "omnium", source / "omnium", ignore=shutil.ignore_patterns("__pycache__")
        )
        (source / "omnium" / "py.typed").touch()  # typed: the .pyi files mypy-protobuf made
        (source / "pyproject.toml").write_text(
            _PYPROJECT.format(
                name=NAME,
                version=version(),
                protobuf=PROTOBUF_VERSION,
                protobuf_next=int(PROTOBUF_VERSION.split(".")[0]) + 1,
                grpc=GRPC_VERSION,
                grpc_next=int(GRPC_VERSION.split(".")[0]) + 1,
            )
        )
        subprocess.run(
            [
                sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                "--no-build-isolation", "--wheel-dir", str(out), str(source),
            ],
            check=True,
        )  # fmt: skip
    wheel = out / f"{NAME.replace('-', '_')}-{version()}-py3-none-any.whl"
    if not wheel.is_file():
        raise SystemExit(f"pip made no {wheel.name} in {out}")
    return wheel


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m dev.stubs", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the wheel goes")
    print(build(parser.parse_args().out))


if __name__ == "__main__":
    main()
