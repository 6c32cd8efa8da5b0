"""SLOW: the image built by `make image`, every service in a container of its own, a Games day.

The image is built once per version (deploy/image/build.sh skips a tag it has; the first build
on a machine also makes the Debian base, a few minutes). Every process runs from it on the host
network as user 10001 in production mode (gRPC over TLS with a CA made here, hashed caller
tokens), against this test's PostgreSQL database and the tests' Redis, beside the Scout
simulator and the demo clients' servers on this machine's own address (dev/image.py, which
`make run-image` runs too). The demo import lands, a scorer's tap is saved through the gateway,
the public API serves the schedule, the SFTP client gets its files; then each container gets
SIGTERM and exits 0 within its grace, and nothing it answered for is lost.
Run it alone with `-k image_run`.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from dev.games_day import set_up_demo
from dev.image import (
    LIMITS,
    SERVICES,
    Credentials,
    ImageStack,
    Ports,
    build_image,
    demo_commands,
    demo_environ,
    host_address,
    podman,
    prepare_demo,
    production_env,
    secret_folder,
)
from omnium_accounts import Accounts
from omnium_settings import Settings
from tests.support.scoring import assign
from tests.support.servers import Servers
from tests.support.sftp import _free_port

pytestmark = pytest.mark.timeout(1800)
PASSWORD = "a long password for the image"
# Never in the production image: the tests' and linters' tools, and the contracts' generator.
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
# What the image holds, read from inside it.
_INVENTORY = """
import importlib.metadata as m, json, pathlib as p
o = p.Path("/opt/omnium")
print(json.dumps({
    "packages": sorted(d.metadata["Name"].lower().replace("_", "-") for d in m.distributions()),
    "contract": (o / "libs/omnium_contract/omnium/command/v1/command_pb2_grpc.py").is_file(),
    "there": [str(x) for x in (o / "services/scout-sim", o / "dev",
              o / "services/delivery/omnium_delivery/sinks.py", p.Path("/opt/build-venv"))
              if x.exists()],
    "providers": [x.name for x in (o / "providers").glob("*.toml")],
}))
"""


@pytest.fixture(scope="session")
def image_tag() -> str:
    return build_image()


def _ports() -> Ports:
    return Ports(
        **{
            name: _free_port()
            for name in (
                "command",
                "scoring",
                "imports",
                "delivery",
                "doorbell",
                "gateway",
                "admin",
                "scout_simulator",
                "sftp_sink",
                "webhook_sink",
            )
        },
        metrics=False,
    )


def test_image_run_the_image_holds_the_runtime_and_the_sources_alone(image_tag: str) -> None:
    done = podman("run", "--rm", *LIMITS, image_tag, "python", "-c", _INVENTORY)
    assert done.returncode == 0, done.stderr
    inventory = json.loads(done.stdout)
    assert {"grpcio", "asyncpg", "aiohttp", "jinja2"} <= set(inventory["packages"])
    assert sorted(set(inventory["packages"]) & set(NOT_IN_PRODUCTION)) == []
    # The build stage's generator made the contracts; the stage itself stayed behind.
    assert inventory["contract"]
    # Dev-only: the simulator, the demo integrations and provider, the stand-in client servers.
    assert inventory["there"] == [] and inventory["providers"] == []


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    # Mounted into the containers at the same path: the SFTP client's key, the TLS files.
    return tmp_path / "image-run"


@pytest.fixture
async def demo(
    data_dir: Path, database_url: str, servers: Servers
) -> AsyncIterator[tuple[Ports, str, dict[str, str]]]:
    """The host's side: the Scout simulator replaying a Games day and the clients' servers."""
    host = host_address()
    ports = _ports()
    prepare_demo(data_dir)
    environ = demo_environ(host, ports, database_url, servers.redis_url)
    started = []
    for name, command in demo_commands(data_dir, host, ports).items():
        with (data_dir.parent / f"{name}.log").open("wb") as log:
            started.append(
                await asyncio.create_subprocess_exec(
                    *command, env=environ, stdout=log, stderr=subprocess.STDOUT
                )
            )
    try:
        yield ports, host, environ
    finally:
        for process in started:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                await asyncio.wait_for(process.wait(), timeout=15)
            except TimeoutError:
                process.kill()
                await process.wait()


@pytest.fixture
def stack(
    image_tag: str,
    data_dir: Path,
    database_url: str,
    servers: Servers,
    demo: tuple[Ports, str, dict[str, str]],
) -> Iterator[ImageStack]:
    ports, host, _ = demo
    tls = secret_folder(data_dir / "secrets")
    credentials = Credentials.make()
    env = production_env(
        database_url=database_url,
        redis_url=servers.redis_url,
        tls=tls,
        credentials=credentials,
        ports=ports,
        host=host,
    )
    running = ImageStack(
        image_tag,
        f"omnium-test-{secrets.token_hex(3)}",
        env,
        credentials,
        data_dir / "secrets",
        mounts=[data_dir / "sftp-keys"],
    )
    try:
        yield running
    finally:
        running.remove()


async def _eventually(what: str, probe: Callable[[], Awaitable[Any]], seconds: float = 180) -> Any:
    """Poll `probe` until it returns something true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        value = await probe()
        if value:
            return value
        assert loop.time() < deadline, f"{what}: not seen in {seconds:.0f} s"
        await asyncio.sleep(0.5)


async def test_image_run_every_service_runs_the_games_day_from_the_image_and_stops_on_sigterm(
    stack: ImageStack,
    demo: tuple[Ports, str, dict[str, str]],
    data_dir: Path,
    database_url: str,
    db: asyncpg.Connection,
) -> None:
    ports, _, environ = demo
    # Each container as production runs it: the migration as the migration role, each service
    # as its own role (a grant missing from roles.sql fails here).
    await stack.use_roles(database_url)
    await stack.start_all()
    # Root on this machine, but never in the containers.
    assert {process: stack.user(process) for process in SERVICES} == {
        process: "10001:10001" for process in SERVICES
    }
    settings = Settings.from_env(environ)
    await set_up_demo(database_url, settings, prepare_demo(data_dir), data_dir)

    # The demo import lands: Scout rings, imports fetches and the command service saves.
    event = await _eventually(
        "the demo import's units",
        lambda: db.fetchval(
            "SELECT e.code FROM unit u JOIN event e ON e.id = u.event_id "
            "GROUP BY e.code HAVING count(*) > 100"
        ),
    )
    gateway = f"http://127.0.0.1:{ports.gateway}"
    async with httpx.AsyncClient(base_url=gateway, timeout=10) as http:
        schedule = await http.get(f"/v1/events/{event}/schedule")
        assert schedule.status_code == 200, schedule.text
        assert schedule.json()["units"], schedule.text

        # A scorer's tap, through the gateway's console, saved by scoring and command.
        unit = await db.fetchval(
            "SELECT u.id::text FROM unit u JOIN discipline d ON d.id = u.discipline_id "
            "WHERE d.code = 'FBL' ORDER BY u.code LIMIT 1"
        )
        pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
        try:
            await Accounts(pool, settings).create("mina", "Mina Park", "scorer", PASSWORD)
        finally:
            await pool.close()
        await assign(db, [unit], "mina")
        signed = await http.post("/score/api/sign-in", json={"login": "mina", "password": PASSWORD})
        assert signed.status_code == 200, signed.text
        # The cookie is Secure, as production sets it: a browser sends it over HTTPS alone, so
        # over this plain test connection it is sent by hand.
        assert "secure" in signed.headers["set-cookie"].lower()
        cookie = signed.headers["set-cookie"].split(";", 1)[0]
        headers = {"X-CSRF-Token": signed.json()["csrf"], "Cookie": cookie}
        tap = await http.post(
            f"/score/api/matches/{unit}/actions",
            json={"client_id": "image:1", "kind": "start_period"},
            headers=headers,
        )
        assert tap.json()["outcome"] == "saved", tap.text

    # The SFTP client gets its files from the delivery container.
    ndtv = data_dir / "sftp" / "ndtv"
    files = await _eventually("ndtv's files by SFTP", lambda: _files(ndtv), seconds=240)
    assert any("_DT_SCHEDULE." in name for name in files), files
    # Every service did its work above as its own login, none as a superuser.
    logins = await db.fetch(
        "SELECT DISTINCT a.usename, r.rolsuper FROM pg_stat_activity a "
        "JOIN pg_roles r ON r.rolname = a.usename "
        "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"
    )
    assert {row["usename"] for row in logins} >= set(SERVICES) - {"providers"}, logins
    assert not [row for row in logins if row["rolsuper"] and row["usename"] in SERVICES]

    # SIGTERM to each, as the kubelet sends it: out within the grace, exit 0.
    codes = {process: stack.stop(process) for process in reversed(list(SERVICES))}
    assert codes == {process: 0 for process in SERVICES}, {
        process: stack.logs(process)[-2000:] for process, code in codes.items() if code != 0
    }
    # Nothing answered for was lost: the tap is in the log, once.
    assert await db.fetchval("SELECT count(*) FROM match_action WHERE command_id = 'image:1'") == 1


async def _files(folder: Path) -> list[str]:
    return await asyncio.to_thread(lambda: sorted(os.listdir(folder)) if folder.is_dir() else [])
