"""A Games day for import tests: command service, imports, the Scout simulator, all real."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg

from dev import demo
from omnium_db import init_connection
from omnium_imports import ImportsApp
from omnium_scout_sim import DoorbellTarget, ScoutSimulator, SimulatorConfig
from tests.support.command import CommandClient, running_command, settings_for
from tests.support.waiting import eventually

SECRET = "doorbell-secret-1"
SCHEDULE = demo.SCHEDULE.code
MEDALS = demo.MEDALS.code
FINISHED = ("done", "partly_done", "failed", "scout_failed", "older", "paused_by_guard")


@dataclass(slots=True)
class GamesDay:
    database_url: str
    command: CommandClient
    imports: ImportsApp
    sim: ScoutSimulator
    db: asyncpg.Connection
    schedule_id: str
    medals_id: str

    @property
    def doorbell_url(self) -> str:
        return f"http://127.0.0.1:{self.imports.doorbell_port}"

    async def wait_for_run(self, scout_run_id: str, seconds: float = 60) -> asyncpg.Record:
        """Our run of that Scout run, once it has finished."""

        async def run_and_open_jobs() -> tuple[asyncpg.Record | None, int | None]:
            row = await self.db.fetchrow(
                "SELECT id::text, status, reason, batch_total, batch_done, outcomes, row_count "
                "FROM integration_run WHERE scout_run_id = $1",
                scout_run_id,
            )
            if row is None or row["status"] not in FINISHED:
                return row, None
            # The job closes just after its run (alerts, follow-ups): wait for that too.
            open_jobs = await self.db.fetchval(
                "SELECT count(*) FROM integration_job "
                "WHERE run_id = $1::uuid AND status = 'running'",
                row["id"],
            )
            return row, open_jobs

        row, _ = await eventually(
            run_and_open_jobs,
            until=lambda answer: answer[1] == 0,
            within=seconds,
            what=f"run {scout_run_id} to finish",
        )
        assert row is not None
        return row

    async def jobs_idle(self, seconds: float = 30) -> None:
        await eventually(
            lambda: self.db.fetchval(
                "SELECT count(*) FROM integration_job WHERE status IN ('queued', 'running')"
            ),
            0,
            within=seconds,
            what="the import queue to empty",
        )


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def import_settings(database_url: str, command_port: int, **overrides: Any) -> Any:
    defaults: dict[str, Any] = {
        "command_address": f"127.0.0.1:{command_port}",
        "scout_retry_base_seconds": 0.01,
        "lease_renew_seconds": 0.5,
        "lease_expire_seconds": 3.0,
        "imports_poll_seconds": 0.2,
        "grpc_deadline_seconds": 30.0,
    }
    return settings_for(database_url, **(defaults | overrides))


@asynccontextmanager
async def games_day(
    database_url: str,
    *,
    command_settings: dict[str, Any] | None = None,
    import_overrides: dict[str, Any] | None = None,
    workers: int = 1,
    followups: bool = False,
    service_urls: Mapping[str, str] | None = None,
) -> AsyncIterator[GamesDay]:
    """`followups`: the settle window's timer runs too (OMNIUM_FOLLOWUP_SECONDS).
    `service_urls`: the command and imports services connect there (each as its own database
    role), the test's own connection still to `database_url`."""
    urls = service_urls or {}
    command_url = urls.get("command", database_url)
    async with running_command(command_url, **(command_settings or {})) as command:
        imports = ImportsApp(
            import_settings(
                urls.get("imports", database_url), command.port, **(import_overrides or {})
            )
        )
        port = await imports.start(
            0, workers=workers, scheduler=False, followups=followups, grpc_port=0
        )
        url = f"http://127.0.0.1:{port}"
        sim = ScoutSimulator(
            SimulatorConfig(
                doorbells={
                    "schedule": DoorbellTarget(url, SCHEDULE, SECRET),
                    "medals": DoorbellTarget(url, MEDALS, SECRET),
                }
            )
        )
        await sim.start()
        db = await asyncpg.connect(database_url)
        await init_connection(db)
        try:
            found = await demo.demo_integrations(db, sim.reference(), sim.base_url, SECRET)
            schedule_id, medals_id = found.ids[SCHEDULE], found.ids[MEDALS]
            yield GamesDay(database_url, command, imports, sim, db, schedule_id, medals_id)
        finally:
            await sim.stop()
            await imports.stop(grace=2)
            await db.close()
