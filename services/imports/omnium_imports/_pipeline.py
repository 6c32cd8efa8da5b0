"""The agreed run: fetch, record, map, batches through the command service, close."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import asyncpg
import grpc

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium_db import Queries
from omnium_imports import _batches
from omnium_imports._keystate import KeyStateCache
from omnium_imports._queue import Job
from omnium_imports._scout import ScoutClient, ScoutError, ScoutRun
from omnium_imports.mapping import MappedRow, MappingContext, MappingSpecError, MappingVersion
from omnium_settings import Settings

log = logging.getLogger(__name__)
QUERIES = Queries.load(Path(__file__).with_name("sql"))

# Runs in these states take no more work: a new attempt finds them and stops.
FINISHED = frozenset({"done", "scout_failed", "older"})
_PLACED = frozenset({"accepted", "unchanged", "kept_by_hand"})
_ROW_OUTCOMES = {
    value: name.removeprefix("ROW_OUTCOME_").lower()
    for name, value in command_pb2.RowOutcome.items()
    if value
}


@dataclass(slots=True)
class RunResult:
    """What one job did, for its log line, the job row and the tests."""

    status: str
    run_id: str | None = None
    reason: str | None = None
    outcomes: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class Integration:
    id: str
    code: str
    state: str
    target: str
    base_url: str
    job: str
    creates_units: bool
    version: int | None
    event_code: str
    time_zone: str
    spec: Any


class Pipeline:
    """Runs jobs. One per process; holds the pool, Scout's client and the command stub."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        scout: ScoutClient,
        command: command_pb2_grpc.CommandServiceStub,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.scout = scout
        self.command = command
        self.key_states: dict[str, KeyStateCache] = {}

    async def run_job(self, job: Job) -> RunResult:
        integration = await self._integration(job.integration_id)
        if integration.state != "on" and job.via != "operator":
            return RunResult("skipped", reason=f"the integration is {integration.state}")
        try:
            scout_run = await self._which_run(integration, job)
        except ScoutError as exc:
            if job.scout_run_id is None:
                return RunResult("failed", reason=str(exc))
            # The doorbell named the run: it goes on record as failed, with Scout's answer.
            unread = ScoutRun(job.scout_run_id, integration.job, None, None, None, None, None, None)
            run_id = await self._record(integration, job, unread, "failed", str(exc))
            return RunResult("failed", run_id, str(exc))
        if scout_run is None:
            return RunResult("nothing_new", reason="Scout has no run of this job yet")
        async with self.pool.acquire() as conn:
            known = await conn.fetchrow(QUERIES["find_run"], integration.id, scout_run.id)
        if known is not None and known["status"] in FINISHED:
            return RunResult(
                "nothing_new", known["id"], f"run {scout_run.id} is already {known['status']}"
            )
        if scout_run.status == "failed":
            reason = f"Scout's run {scout_run.id} failed its own checks: {scout_run.reason or '?'}"
            run_id = await self._record(integration, job, scout_run, "scout_failed", reason)
            return RunResult("scout_failed", run_id, reason)
        try:
            version = MappingVersion.parse(integration.spec or {})
        except MappingSpecError as exc:
            reason = f"the integration's mapping (version {integration.version}) is broken: {exc}"
            run_id = await self._record(integration, job, scout_run, "failed", reason)
            return RunResult("failed", run_id, reason)
        # The fetch holds no transaction and no connection: Scout may be slow.
        try:
            items = await self.scout.items(integration.base_url, scout_run)
        except ScoutError as exc:
            run_id = await self._record(integration, job, scout_run, "failed", str(exc))
            return RunResult("failed", run_id, str(exc))
        run_id = await self._record(integration, job, scout_run, "received", None)
        older = await self._newer_applied(integration, scout_run)
        if older is not None:
            reason = f"run {scout_run.id} is older than run {older}, which was applied already"
            await self._finish(run_id, "older", reason, Counter())
            return RunResult("older", run_id, reason)
        return await self._apply(integration, version, run_id, items)

    # -- steps ----------------------------------------------------------------------------

    async def _integration(self, integration_id: str) -> Integration:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(QUERIES["integration"], integration_id)
        if row is None:
            raise LookupError(f"integration {integration_id} is gone")
        return Integration(
            id=row["id"],
            code=row["code"],
            state=row["state"],
            target=row["target"],
            base_url=row["scout_base_url"],
            job=row["scout_job"],
            creates_units=row["creates_units"],
            version=row["current_version"],
            event_code=row["event_code"],
            time_zone=row["time_zone"],
            spec=row["spec"],
        )

    async def _which_run(self, integration: Integration, job: Job) -> ScoutRun | None:
        if job.kind == "pull" and job.scout_run_id:
            return await self.scout.run(integration.base_url, job.scout_run_id)
        # A check takes the newest run whatever its status, so a failing Scout is seen.
        return await self.scout.newest_run(integration.base_url, integration.job)

    async def _record(
        self,
        integration: Integration,
        job: Job,
        run: ScoutRun,
        status: str,
        reason: str | None,
    ) -> str:
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                QUERIES["record_run"],
                integration.id,
                run.id,
                status,
                run.status,
                run.build,
                _day(run.day),
                run.row_count,
                run.finished_at,
                integration.version,
                job.id,
                reason,
            )
            await conn.execute(
                "UPDATE integration_job SET run_id = $2::uuid WHERE id = $1", job.id, row["id"]
            )
        run_id: str = row["id"]
        return run_id

    async def _newer_applied(self, integration: Integration, run: ScoutRun) -> str | None:
        if run.finished_at is None:
            return None
        async with self.pool.acquire() as conn:
            newer: str | None = await conn.fetchval(
                QUERIES["newer_applied_run"], integration.id, run.finished_at, run.build
            )
        return newer

    async def _apply(
        self,
        integration: Integration,
        version: MappingVersion,
        run_id: str,
        items: list[Any],
    ) -> RunResult:
        async with self.pool.acquire() as conn:
            lookups: dict[str, dict[str, str]] = {}
            for row in await conn.fetch(QUERIES["lookups"], integration.id):
                lookups.setdefault(row["kind"], {})[row["external_id"]] = row["our_id"]
            mapped = version.map_rows(items, MappingContext(integration.time_zone, lookups))
            key_state = await self._key_state(conn, integration)
            ready: list[MappedRow] = []
            skipped = 0
            for row in mapped:
                if row.outcome != "ok":
                    continue
                if key_state.skippable(row.key, row.hash):
                    skipped += 1
                else:
                    ready.append(row)
            codes = [str(row.value.get("code")) for row in ready if row.value.get("code")]
            unit_ids = (
                dict(await conn.fetch(QUERIES["unit_ids_by_code"], integration.id, codes))
                if integration.target == "unit" and codes
                else {}
            )
        outcomes: Counter[str] = Counter(row.outcome for row in mapped if row.outcome != "ok")
        if skipped:
            outcomes["unchanged"] += skipped
            outcomes["fast_path"] += skipped
        await self._log_mapping(integration, run_id, mapped)
        batches = await self._batches(integration, run_id, mapped, ready, unit_ids, key_state)
        failures: list[str] = []
        for batch_no, rows in enumerate(batches):
            answer, problem = await self._send(integration, run_id, batch_no, rows)
            if answer is None:
                failures.append(f"batch {batch_no}: {problem}")
                outcomes["not_sent"] += len(rows)
                for sent in rows:
                    key_state.forget(sent.key)
                continue
            hashes = {sent.key: sent.hash for sent in rows}
            for row in answer.rows:
                outcome = _ROW_OUTCOMES.get(row.outcome, "problem")
                outcomes[outcome] += 1
                if outcome in _PLACED:
                    key_state.written(row.key, hashes.get(row.key), row.subject_id, row.applied_seq)
                else:
                    key_state.forget(row.key)
        key_state.loaded_for_run = run_id
        if failures:
            reason = (
                f"{len(failures)} of {len(batches)} batches could not be saved "
                f"({'; '.join(failures[:3])}). Run it again to continue from them."
            )
            await self._finish(run_id, "partly_done", reason, outcomes)
            return RunResult("partly_done", run_id, reason, outcomes)
        await self._finish(run_id, "done", None, outcomes)
        return RunResult("done", run_id, None, outcomes)

    async def _batches(
        self,
        integration: Integration,
        run_id: str,
        mapped: list[MappedRow],
        ready: list[MappedRow],
        unit_ids: dict[str, str],
        key_state: KeyStateCache,
    ) -> list[list[command_pb2.BatchRow]]:
        """The run's batches: as first cut when this run was tried before, else cut now."""
        target = integration.target
        async with self.pool.acquire() as conn:
            plan: list[list[str]] | None = await conn.fetchval(QUERIES["run_plan"], run_id)
        if plan:
            # Same batches under the same numbers; rows that became ready since go after them.
            ok = {row.key: row for row in mapped if row.outcome == "ok" and row.key}
            planned = {key for keys in plan for key in keys}
            later = [row for row in ready if row.key not in planned]
            groups = [
                _batches.ordered([ok[key] for key in keys if key in ok], target, unit_ids)
                for keys in plan
            ]
            groups += _batches.chunks(
                _batches.ordered(later, target, unit_ids), self.settings.batch_max_units
            )
        else:
            groups = _batches.chunks(
                _batches.ordered(ready, target, unit_ids), self.settings.batch_max_units
            )
        plan = [[row.key or "" for row, _ in group] for group in groups]
        async with self.pool.acquire() as conn:
            await conn.execute(QUERIES["set_batches"], run_id, len(groups), plan)
        return [
            [_batches.batch_row(row, target, unit_id) for row, unit_id in group] for group in groups
        ]

    async def _key_state(self, conn: asyncpg.Connection, integration: Integration) -> KeyStateCache:
        """This process's key state of the integration, brought up to date.

        Loaded whole when first used or when the last applied run was not ours (another copy
        of this process ran it); otherwise only the records changed since are read.
        """
        cache = self.key_states.get(integration.id)
        last = await conn.fetchval(QUERIES["last_applied_run"], integration.id)
        if cache is None or cache.loaded_for_run != last or cache.target != integration.target:
            cache = KeyStateCache(
                integration.id, integration.target, self.settings.fastpath_lag_seconds
            )
            await cache.load(conn)
            cache.loaded_for_run = last
            self.key_states[integration.id] = cache
        await cache.refresh(conn)
        return cache

    async def _send(
        self,
        integration: Integration,
        run_id: str,
        batch_no: int,
        rows: list[command_pb2.BatchRow],
    ) -> tuple[command_pb2.BatchAnswer | None, str]:
        """One batch, tried again on its own (growing waits) while the answer is try again."""
        batch = command_pb2.ImportBatch(
            command_id=f"{run_id}:{batch_no}",
            integration_code=integration.code,
            run_id=run_id,
            batch_no=batch_no,
            event_code=integration.event_code,
            rows=rows,
            create_units=integration.creates_units,
            actor=actor_pb2.Actor(
                kind=actor_pb2.Actor.KIND_INTEGRATION,
                name=f"integration:{integration.code}",
                source_code=integration.code,
                screen="imports",
            ),
        )
        wait = self.settings.scout_retry_base_seconds
        problem = ""
        for attempt in range(1, self.settings.batch_tries + 1):
            try:
                answer: command_pb2.BatchAnswer = await self.command.ApplyImportBatch(
                    batch, timeout=self.settings.grpc_deadline_seconds
                )
            except grpc.aio.AioRpcError as exc:
                problem = f"the command service answered {exc.code().name}: {exc.details()}"
            else:
                if answer.outcome in (command_pb2.OUTCOME_ACCEPTED, command_pb2.OUTCOME_DUPLICATE):
                    return answer, ""
                if answer.outcome == command_pb2.OUTCOME_REFUSED:
                    return None, f"refused: {answer.reason}"
                problem = answer.reason or "try again"
            if attempt < self.settings.batch_tries:
                log.info(
                    "run %s batch %s: %s; trying again in %.1f s", run_id, batch_no, problem, wait
                )
                await asyncio.sleep(wait)
                wait *= 2
        return None, f"{problem} ({self.settings.batch_tries} tries)"

    async def _log_mapping(
        self, integration: Integration, run_id: str, mapped: list[MappedRow]
    ) -> None:
        logged = [row for row in mapped if row.outcome in ("held", "problem")]
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(QUERIES["forget_mapping_rows"], run_id)
            if logged:
                await conn.execute(
                    QUERIES["log_mapping_rows"],
                    run_id,
                    integration.id,
                    integration.target,
                    [row.position for row in logged],
                    [row.key or f"row {row.position}" for row in logged],
                    [row.hash for row in logged],
                    [row.outcome for row in logged],
                    [row.reason for row in logged],
                )

    async def _finish(
        self, run_id: str, status: str, reason: str | None, outcomes: Counter[str]
    ) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(QUERIES["finish_run"], run_id, status, reason, dict(outcomes))


def _day(day: str | None) -> date | None:
    try:
        return date.fromisoformat(day) if day else None
    except ValueError:
        return None
