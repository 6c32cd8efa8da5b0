"""Expand, then contract: the previous release's services run on today's schema.

A release is rolled back by running the previous release's code on the schema this one made
(libs/omnium_db/migrations/README.md). Here the previous release (dev/previous_release.py)
is checked out into a temporary folder and its command, scoring and gateway processes are
started against a database migrated by today's code: a scorer's tap, an import batch and a
public read each succeed through them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dev.previous_release import Checkout, checked_out, started
from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_accounts import hash_password
from omnium_db import applied_versions
from omnium_devstack.stack import dev_process_environ
from tests.support.command import CALLERS_ENV, TOKEN, import_batch, unit_row
from tests.support.games import EVENT, make_games, make_run
from tests.support.servers import Servers
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(420)
PASSWORD = "a long password"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _serving(port: int) -> bool:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=2
            )
        except grpc.aio.AioRpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def _ready(url: str) -> bool:
    async with httpx.AsyncClient(timeout=2) as client:
        try:
            return (await client.get(url)).status_code == 200
        except httpx.HTTPError:
            return False


async def _wait_ready(
    checks: dict[str, Callable[[], Awaitable[bool]]],
    processes: dict[str, asyncio.subprocess.Process],
    logs: dict[str, Path],
) -> None:
    waiting = dict(checks)

    async def still_waiting() -> list[str]:
        for name, check in list(waiting.items()):
            process = processes[name]
            assert process.returncode is None, (
                f"the previous release's {name} exited {process.returncode}: "
                f"{logs[name].read_text()[-3000:]}"
            )
            if await check():
                del waiting[name]
        return sorted(waiting)

    await eventually(still_waiting, [], within=120, every=0.3, what="every service ready")


async def _scorer(db: asyncpg.Connection, event_id: str, unit_id: str) -> None:
    hashed = await asyncio.to_thread(hash_password, PASSWORD)
    account = await db.fetchval(
        "INSERT INTO account (login, name, role, password_hash) "
        "VALUES ('mina', 'Mina Park', 'scorer', $1) RETURNING id",
        hashed,
    )
    await db.execute(
        "INSERT INTO scorer_assignment (account_id, event_id, unit_id, assigned_by) "
        "VALUES ($1, $2, $3, 'the test')",
        account,
        event_id,
        unit_id,
    )


@pytest.fixture(scope="module")
def previous() -> Iterator[Checkout]:
    with checked_out() as checkout:
        yield checkout


async def test_the_previous_release_scores_imports_and_reads_on_todays_schema(
    previous: Checkout, database_url: str, db: asyncpg.Connection, servers: Servers, tmp_path: Path
) -> None:
    today = await applied_versions(db)  # migrated by today's code (the template database)
    ours = len(list((previous.root / "libs" / "omnium_db" / "migrations").glob("*.sql")))
    print(f"previous release: {previous.commit[:12]}, {previous.chosen}")
    assert ours <= len(today)
    games = await make_games(db, units=2)
    scored, imported = games.units
    await _scorer(db, games.event_id, scored)
    run_id = await make_run(db, games)

    ports = {name: _free_port() for name in ("command", "scoring", "gateway")}
    env = previous.environ(
        dev_process_environ(),
        {
            "OMNIUM_ENVIRONMENT": "development",
            "OMNIUM_DATABASE_URL": database_url,
            "OMNIUM_REDIS_URL": servers.redis_url,
            "OMNIUM_GRPC_CALLERS": CALLERS_ENV,
            "OMNIUM_GRPC_TOKEN": TOKEN,
            "OMNIUM_COMMAND_PORT": str(ports["command"]),
            "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{ports['command']}",
            "OMNIUM_SCORING_PORT": str(ports["scoring"]),
            "OMNIUM_SCORING_ADDRESS": f"127.0.0.1:{ports['scoring']}",
            "OMNIUM_SCORING_PROVIDERS_DIR": str(tmp_path),
            "OMNIUM_GATEWAY_PORT": str(ports["gateway"]),
            "OMNIUM_GATEWAY_WORKERS": "1",
            "OMNIUM_COMMAND_METRICS_PORT": "0",
            "OMNIUM_SCORING_METRICS_PORT": "0",
            "OMNIUM_GATEWAY_METRICS_PORT": "0",
        },
    )
    logs = {name: tmp_path / f"{name}.log" for name in ports}
    gateway = f"http://127.0.0.1:{ports['gateway']}"
    async with contextlib.AsyncExitStack() as stack:
        processes = {
            name: await stack.enter_async_context(
                started(previous, f"omnium_{name}", env, logs[name])
            )
            for name in ports
        }
        await _wait_ready(
            {
                "command": lambda: _serving(ports["command"]),
                "scoring": lambda: _serving(ports["scoring"]),
                "gateway": lambda: _ready(f"{gateway}/readyz"),
            },
            processes,
            logs,
        )

        # A scorer's tap, through the previous release's gateway, scoring and command.
        async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
            signed = await http.post(
                "/score/api/sign-in", json={"login": "mina", "password": PASSWORD}
            )
            assert signed.status_code == 200, signed.text
            synced = await http.post(
                "/score/api/sync",
                json={
                    "actions": [
                        {"client_id": "old:1", "unit_id": scored, "kind": "start_period"},
                        {"client_id": "old:2", "unit_id": scored, "kind": "goal", "side": 2},
                    ]
                },
                headers={"X-CSRF-Token": signed.json()["csrf"]},
            )
            assert synced.status_code == 200, synced.text
            assert [a["outcome"] for a in synced.json()["answers"]] == ["saved", "saved"]

        # An import batch, as the imports service sends it, to the previous command service.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['command']}") as channel:
            answer = await command_pb2_grpc.CommandServiceStub(channel).ApplyImportBatch(
                import_batch(
                    run_id, 0, [unit_row(0, imported, status="DELAYED", venue="Toyota Stadium")]
                ),
                metadata=(("authorization", f"Bearer {TOKEN}"),),
                timeout=60,
            )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
        assert [r.outcome for r in answer.rows] == [command_pb2.ROW_OUTCOME_ACCEPTED]

        # Public reads of both, from the previous gateway.
        async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
            one = await http.get(f"/v1/events/{EVENT}/units/{games.unit_codes[scored]}")
            two = await http.get(f"/v1/events/{EVENT}/units/{games.unit_codes[imported]}")
            schedule = await http.get(f"/v1/events/{EVENT}/schedule")
        assert one.status_code == 200, one.text
        assert one.json()["sides"][1]["score"] == "1", one.text
        assert two.status_code == 200, two.text
        assert (two.json()["status"], two.json()["venue"]) == ("DELAYED", "Toyota Stadium")
        assert schedule.status_code == 200, schedule.text
        for name, process in processes.items():
            assert process.returncode is None, f"{name}: {logs[name].read_text()[-3000:]}"
