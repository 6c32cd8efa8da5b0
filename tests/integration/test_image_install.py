"""SLOW (about 90 s, mostly pip): the image's install steps, run here as the Dockerfile does.

No Docker engine or registry is reachable on these machines, so the image cannot be built in the
tests. This runs deploy/image/install.sh, the script the Dockerfile runs, into a clean venv from
requirements/runtime.txt alone, generates the contracts in a venv of build.txt as the build stage
does, then starts every service from that venv in production mode (gRPC over TLS, made-up
secrets) against the test PostgreSQL and Redis, waits for each to answer its health check as
Kubernetes would, and stops it with SIGTERM.
Run it alone with `-k image_install`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import grpc
import httpx
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.games import make_games
from tests.support.servers import Servers
from tests.support.tls import Tls, make_tls

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "deploy" / "image" / "install.sh"
TOKEN = secrets.token_hex(32)
TOKEN_SHA256 = hashlib.sha256(TOKEN.encode()).hexdigest()
# Never in the production venv: the tests' and linters' tools, and the contracts' generator.
NOT_IN_PRODUCTION = (
    "pytest",
    "mypy",
    "ruff",
    "playwright",
    "schemathesis",
    "hypothesis",
    "grpcio-tools",
    "mypy-protobuf",
    "kubernetes-validate",
)

pytestmark = pytest.mark.timeout(600)


def _install(*args: str | Path) -> None:
    env = {**os.environ, "PYTHON_FOR_VENV": sys.executable}
    done = subprocess.run(
        ["bash", str(INSTALL), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=480,
        check=False,
    )
    assert done.returncode == 0, f"install.sh {args[0]}: {done.stderr[-3000:]}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """/opt of the image, laid out under a temporary folder by the Dockerfile's steps."""
    root = tmp_path_factory.mktemp("image")
    _install("venv", root / "build-venv", REPO / "requirements" / "build.txt")
    _install("venv", root / "venv", REPO / "requirements" / "runtime.txt")
    _install(
        "contracts",
        root / "build-venv" / "bin" / "python",
        REPO,
        root / "omnium" / "libs" / "omnium_contract",
    )
    _install("app", REPO, root / "omnium", root / "venv")
    yield root


def _installed(venv: Path) -> set[str]:
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in "
            "m.distributions()))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return {name.strip().lower().replace("_", "-") for name in out.stdout.split()}


def test_image_install_the_production_venv_has_no_dev_tools(image: Path) -> None:
    installed = _installed(image / "venv")
    assert {"grpcio", "asyncpg", "aiohttp", "jinja2"} <= installed
    assert sorted(installed & set(NOT_IN_PRODUCTION)) == []
    # The build stage's venv had the generator, and the sources carry what it made.
    assert "grpcio-tools" in _installed(image / "build-venv")
    contract = image / "omnium" / "libs" / "omnium_contract" / "omnium" / "command" / "v1"
    assert (contract / "command_pb2_grpc.py").is_file()
    assert not (image / "omnium" / "services" / "scout-sim").exists()
    # Dev-only: the demo provider (its key is in its file) and the demo integrations.
    assert list((image / "omnium" / "providers").glob("*.toml")) == []
    assert not (image / "omnium" / "dev").exists()
    assert not (
        image / "omnium" / "services" / "delivery" / "omnium_delivery" / "sinks.py"
    ).exists()


async def _grpc_serving(port: int, tls: Tls) -> bool:
    # No token: the kubelet's gRPC probe sends none, so health must answer without one.
    credentials = grpc.ssl_channel_credentials(tls.ca.read_bytes())
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def _http_ok(url: str) -> bool:
    async with httpx.AsyncClient(timeout=2) as client:
        try:
            return (await client.get(url)).status_code == 200
        except httpx.HTTPError:
            return False


async def test_image_install_every_service_starts_from_the_runtime_venv_and_stops_on_sigterm(
    image: Path, database_url: str, db: asyncpg.Connection, servers: Servers, tmp_path: Path
) -> None:
    await make_games(db, units=2)  # the Games the example clients name
    tls = make_tls(tmp_path / "tls")
    ports = {
        name: _free_port()
        for name in ("command", "scoring", "imports", "doorbell", "delivery", "gateway", "admin")
    }
    # The example clients file of the manifests, as the delivery pods mount it.
    example = yaml.safe_load(
        (REPO / "deploy" / "kubernetes" / "delivery-clients.example.yaml").read_text()
    )
    clients = tmp_path / "clients.json"
    clients.write_text(example["data"]["clients.json"])
    assert json.loads(clients.read_text())["clients"]
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OMNIUM_", "PYTHON", "VIRTUAL_ENV"))
    }
    base |= {
        "OMNIUM_DATABASE_URL": database_url,
        "OMNIUM_REDIS_URL": servers.redis_url,
        "OMNIUM_BIND_HOST": "127.0.0.1",
        # As the image runs: production, so a dev default would stop a service here.
        "OMNIUM_ENVIRONMENT": "production",
        "OMNIUM_GRPC_TLS_CERT_FILE": str(tls.cert),
        "OMNIUM_GRPC_TLS_KEY_FILE": str(tls.key),
        "OMNIUM_GRPC_TLS_CA_FILE": str(tls.ca),
        # Production keeps only each token's hash.
        "OMNIUM_GRPC_CALLERS": f"image-test:service:sha256={TOKEN_SHA256}",
        "OMNIUM_GRPC_TOKEN": TOKEN,
        "OMNIUM_GRPC_GRACE_SECONDS": "2",
        "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{ports['command']}",
        "OMNIUM_IMPORTS_ADDRESS": f"127.0.0.1:{ports['imports']}",
        "OMNIUM_SCORING_ADDRESS": f"127.0.0.1:{ports['scoring']}",
        **{f"OMNIUM_{name.upper()}_PORT": str(port) for name, port in ports.items()},
        "OMNIUM_GATEWAY_WORKERS": "1",
        "OMNIUM_DELIVERY_CLIENTS_FILE": str(clients),
    }
    # (how it starts, how Kubernetes would see it ready)
    services = {
        "omnium_command": [lambda: _grpc_serving(ports["command"], tls)],
        "omnium_scoring": [lambda: _grpc_serving(ports["scoring"], tls)],
        "omnium_imports": [
            lambda: _grpc_serving(ports["imports"], tls),
            lambda: _http_ok(f"http://127.0.0.1:{ports['doorbell']}/readyz"),
        ],
        "omnium_delivery": [lambda: _grpc_serving(ports["delivery"], tls)],
        "omnium_gateway": [lambda: _http_ok(f"http://127.0.0.1:{ports['gateway']}/readyz")],
        "omnium_admin": [lambda: _http_ok(f"http://127.0.0.1:{ports['admin']}/readyz")],
    }
    python = image / "venv" / "bin" / "python"
    run = tmp_path / "run"  # an empty working folder: nothing is found from the repository
    run.mkdir()
    started: dict[str, asyncio.subprocess.Process] = {}
    logs: dict[str, Path] = {}
    try:
        for module in [*services, "omnium_scoring pull"]:
            logs[module] = tmp_path / f"{module.replace(' ', '-')}.log"
            with logs[module].open("wb") as log:
                started[module] = await asyncio.create_subprocess_exec(
                    str(python),
                    "-m",
                    *module.split(),
                    cwd=run,
                    env=base,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        waiting = dict(services)
        while waiting:
            for module, checks in list(waiting.items()):
                process = started[module]
                assert process.returncode is None, (
                    f"{module} exited {process.returncode}: {logs[module].read_text()[-3000:]}"
                )
                if all([await check() for check in checks]):
                    del waiting[module]
            assert loop.time() < deadline, f"not ready in 60 s: {sorted(waiting)}"
            await asyncio.sleep(0.2)
        # The provider pull has no port: it is running, and it stops cleanly like the rest.
        assert started["omnium_scoring pull"].returncode is None, logs["omnium_scoring pull"]
        for process in started.values():
            process.send_signal(signal.SIGTERM)
        for module, process in started.items():
            code = await asyncio.wait_for(process.wait(), timeout=30)
            assert code == 0, f"{module} exited {code}: {logs[module].read_text()[-3000:]}"
    finally:
        for process in started.values():
            if process.returncode is None:
                process.kill()
                await process.wait()
