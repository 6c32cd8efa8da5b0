"""The process's side of the run: one `Pipeline` holds the run's context (the pool, Scout's
client, the command service, the key state), the alerts, and takes each job through the
stages (_stages.py) or a stored run through a dry run (_dry.py)."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_imports import _runs
from omnium_imports._keystate import KeyStateCache
from omnium_imports._queue import Job
from omnium_imports._review import Alerts, tell_of_run
from omnium_imports._runs import Integration
from omnium_imports._scout import ScoutClient
from omnium_imports.mapping import MappingVersion
from omnium_imports.run._context import Context, RunResult
from omnium_imports.run._dry import dry_run
from omnium_imports.run._stages import run_stages
from omnium_settings import Settings
from omnium_telemetry import continued_span


class Pipeline:
    """Runs jobs. One per process; holds the run's context and the alerts."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        scout: ScoutClient,
        command: command_pb2_grpc.CommandServiceStub,
        http: httpx.AsyncClient | None = None,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.context = Context(settings, pool, scout, command, stopping or asyncio.Event())
        self.alerts = Alerts(settings, http)

    @property
    def scout(self) -> ScoutClient:
        return self.context.scout

    @property
    def key_states(self) -> dict[str, KeyStateCache]:
        """This process's key state of each integration (the fast path)."""
        return self.context.key_states

    async def run_job(self, job: Job) -> RunResult:
        # The run continues the ring's trace (the job row carried it over the queue): every
        # stage and batch is a span under this one.
        with continued_span(
            "imports.job",
            [job.trace_context],
            attributes={"omnium.job.id": job.id, "omnium.job.kind": job.kind},
        ) as span:
            integration = await self._integration(job.integration_id)
            result = await run_stages(self.context, integration, job)
            span.set_attribute("omnium.run.status", result.status)
            await self.context.outlast(
                "telling of the run", lambda: self._tell(integration, result)
            )
        return result

    async def dry_run(
        self,
        integration_id: str,
        scout_run_id: str,
        *,
        version: MappingVersion | None = None,
        items: list[object] | None = None,
    ) -> tuple[list[command_pb2.RowAnswer], dict[str, int]]:
        """A stored Scout run against today's data: what each row would do. Writes nothing.

        Every row is compared (no fast path), through the command service's own diff.
        `version` tries a mapping before it is published (`mapping check`); `items` are the
        run's rows when the caller read them already.
        """
        integration = await self._integration(integration_id)
        return await dry_run(self.context, integration, scout_run_id, version=version, items=items)

    async def _tell(self, integration: Integration, result: RunResult) -> None:
        async with self.context.pool.acquire() as conn:
            await tell_of_run(
                self.alerts,
                conn,
                integration.id,
                result.status,
                result.reason,
                result.run_id,
                dict(integration.settings),
            )

    async def _integration(self, integration_id: str) -> Integration:
        found = await self.context.db(
            f"integration {integration_id}",
            lambda conn: _runs.integration(conn, integration_id),
        )
        if found is None:
            raise LookupError(f"integration {integration_id} is gone")
        return found
