"""Helpers of the imports truth tests: a Games day, runs, alerts and the card."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium_admin import _present as present
from omnium_command import CommandApp
from omnium_grpc import open_channel
from tests.support.imports import SCHEDULE, GamesDay

EXAMPLES = Path(__file__).resolve().parents[2] / "services" / "imports" / "examples"


@asynccontextmanager
async def operator(day: GamesDay) -> AsyncIterator[imports_pb2_grpc.ImportsServiceStub]:
    channel = open_channel(f"127.0.0.1:{day.imports.grpc_port}", day.imports.settings)
    try:
        yield imports_pb2_grpc.ImportsServiceStub(channel)
    finally:
        await channel.close()


@asynccontextmanager
async def command_back(day: GamesDay) -> AsyncIterator[CommandApp]:
    """The command service started again, on the port imports already sends to."""
    app = CommandApp(day.command.settings)
    await app.start(day.command.port)
    try:
        yield app
    finally:
        await app.stop(grace=1)


async def done(day: GamesDay, job: str = "schedule") -> dict[str, Any]:
    run = await day.sim.make_run(job, wait_doorbell=True)
    ours = dict(await day.wait_for_run(run.id))
    assert ours["status"] == "done", ours["reason"]
    return ours


async def page_run(day: GamesDay, keys: list[str], job: str = "schedule") -> dict[str, Any]:
    run = await day.sim.make_run(job, build="page", keys=keys, wait_doorbell=True)
    return dict(await day.wait_for_run(run.id))


async def open_alerts(day: GamesDay) -> list[str]:
    rows = await day.db.fetch("SELECT kind FROM alert WHERE status = 'open' ORDER BY kind")
    return [row["kind"] for row in rows]


async def run_status(day: GamesDay, run_id: str) -> str:
    status: str = await day.db.fetchval(
        "SELECT status FROM integration_run WHERE id = $1::uuid", run_id
    )
    return status


async def card(ops: imports_pb2_grpc.ImportsServiceStub, code: str = SCHEDULE) -> dict[str, Any]:
    """The integration's card as the admin console shows it."""
    answer = await ops.ListIntegrations(imports_pb2.ListIntegrationsRequest(), timeout=10)
    return present.card(next(i for i in answer.integrations if i.code == code))


def first_key(day: GamesDay) -> str:
    key: str = day.sim.reference()["units"][0]["externalId"]
    return key
