"""The agreed run: fetch, record, map, batches through the command service, close."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, TypeVar

import asyncpg
import grpc
import httpx
from google.protobuf import struct_pb2

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium_db import outlast
from omnium_imports import _batches
from omnium_imports import _guards as guards
from omnium_imports import _settle as settle
from omnium_imports._keystate import KeyStateCache
from omnium_imports._queue import Job
from omnium_imports._review import Alerts, open_review
from omnium_imports._scout import ScoutClient, ScoutError, ScoutRun
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappedRow, MappingContext, MappingSpecError, MappingVersion
from omnium_settings import Settings

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# Answers of the command service that pass by themselves (a restart, a failover, a full
# queue): the batch is sent again until batch_retry_seconds are over.
_PASSING_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)

# Runs in these states take no more work: a new attempt finds them and stops.
FINISHED = frozenset({"done", "scout_failed", "older"})
_PLACED = frozenset({"accepted", "unchanged", "kept_by_hand"})
# A run ending so raises this alert kind, with these words before its reason.
_ALERTS = {
    "failed": ("run_failed", "Run failed"),
    "partly_done": ("batch_failed", "Run partly done"),
    "paused_by_guard": ("guard", "Run paused by a check"),
}
# A run ending so settles the guard pauses it overtook: its own (written, or older), and
# those of older runs (Start would end them older).
_NO_LONGER_PAUSED = frozenset({"done", "partly_done", "older"})
# A done run means none of these causes holds any more.
_CLEARED_BY_DONE = ("run_failed", "batch_failed", "guard", "scout_failed", "quiet")
_MAPPING_OUTCOMES = {
    "held": command_pb2.ROW_OUTCOME_HELD,
    "problem": command_pb2.ROW_OUTCOME_PROBLEM,
}
_ROW_OUTCOMES = {
    value: name.removeprefix("ROW_OUTCOME_").lower()
    for name, value in command_pb2.RowOutcome.items()
    if value
}


class HandedOver(Exception):
    """This process is stopping: its run stopped between batches, to go back to the queue
    with its run kept, so another copy continues it at once (saved batches answer duplicate)."""


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
    settings: dict[str, Any] = field(default_factory=dict)


class Pipeline:
    """Runs jobs. One per process; holds the pool, Scout's client and the command stub."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        scout: ScoutClient,
        command: command_pb2_grpc.CommandServiceStub,
        http: httpx.AsyncClient | None = None,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.settings = settings
        # Set when the process stops: no batch is started after it (see HandedOver).
        self.stopping = stopping or asyncio.Event()
        self.pool = pool
        self.scout = scout
        self.command = command
        self.key_states: dict[str, KeyStateCache] = {}
        self.alerts = Alerts(settings, http)

    async def run_job(self, job: Job) -> RunResult:
        integration = await self._integration(job.integration_id)
        result = await self._run_job(integration, job)
        await self._outlast("telling of the run", lambda: self._tell(integration, result))
        return result

    async def _outlast(self, what: str, work: Callable[[], Awaitable[_T]]) -> _T:
        """The pipeline's own read or write of its bookkeeping, tried again while the database
        restarts or fails over, so a short outage does not fail the run. Each `work` is safe to
        run twice: one transaction, or writes that come out the same when repeated."""
        settings = self.settings
        return await outlast(
            work,
            what=what,
            seconds=settings.imports_database_retry_seconds,
            first_wait=settings.imports_database_retry_first_seconds,
            max_wait=settings.imports_database_retry_max_seconds,
            log=log,
        )

    async def _tell(self, integration: Integration, result: RunResult) -> None:
        """Raise an alert for each cause a person must know of; clear those that are gone."""
        alerts = self.alerts
        async with self.pool.acquire() as conn:
            if result.status == "done":
                await alerts.clear(conn, integration.id, *_CLEARED_BY_DONE)
            elif result.status in _ALERTS:
                kind, words = _ALERTS[result.status]
                await alerts.raise_(
                    conn, integration.id, kind, f"{words}: {result.reason}", result.run_id
                )
            elif result.status == "scout_failed":
                needed = self.settings.alert_scout_failed_in_row
                recent = await conn.fetch(QUERIES["recent_scout_statuses"], integration.id, needed)
                if len(recent) == needed and all(r["scout_status"] == "failed" for r in recent):
                    await alerts.raise_(
                        conn,
                        integration.id,
                        "scout_failed",
                        f"Scout's last {needed} runs failed their own checks: {result.reason}",
                        result.run_id,
                    )

    async def _run_job(self, integration: Integration, job: Job) -> RunResult:
        if integration.state != "on" and job.via != "operator":
            return RunResult("skipped", reason=f"the integration is {integration.state}")
        try:
            scout_run = await self._which_run(integration, job)
        except ScoutError as exc:
            if job.scout_run_id is None:
                return RunResult("failed", reason=str(exc))
            # The doorbell named the run: it goes on record as failed, with Scout's answer.
            unread = ScoutRun.unread(job.scout_run_id, integration.job)
            run_id = await self._record(integration, job, unread, "failed", str(exc))
            return RunResult("failed", run_id, str(exc))
        if scout_run is None:
            return RunResult("nothing_new", reason="Scout has no run of this job yet")
        known = await self._outlast(
            f"run {scout_run.id}", lambda: self._fetchrow("find_run", integration.id, scout_run.id)
        )
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
        return await self._apply(integration, version, run_id, items, scout_run, job)

    async def dry_run(
        self,
        integration_id: str,
        scout_run_id: str,
        *,
        version: MappingVersion | None = None,
        items: list[Any] | None = None,
    ) -> tuple[list[command_pb2.RowAnswer], dict[str, int]]:
        """A stored Scout run against today's data: what each row would do. Writes nothing.

        Every row is compared (no fast path), through the command service's own diff.
        `version` tries a mapping before it is published (`mapping check`); `items` are the
        run's rows when the caller read them already.
        """
        integration = await self._integration(integration_id)
        if items is None:
            scout_run = await self.scout.run(integration.base_url, scout_run_id)
            items = await self.scout.items(integration.base_url, scout_run)
        if version is None:
            version = MappingVersion.parse(integration.spec or {})
        async with self.pool.acquire() as conn:
            mapped = await _map(conn, integration, version, items)
            ready = [row for row in mapped if row.outcome == "ok"]
            unit_ids = await _unit_ids(conn, integration, ready)
        answers: list[command_pb2.RowAnswer] = [
            command_pb2.RowAnswer(
                position=row.position,
                key=row.key or "",
                reason=row.reason,
                outcome=_MAPPING_OUTCOMES[row.outcome],
            )
            for row in mapped
            if row.outcome in _MAPPING_OUTCOMES
        ]
        outcomes: Counter[str] = Counter(row.outcome for row in mapped if row.outcome != "ok")
        pretend = str(uuid.uuid4())
        groups = _batches.chunks(
            _batches.ordered(ready, integration.target, unit_ids), self.settings.batch_max_units
        )
        clearing = _batches.Clearing.of(version)
        for batch_no, group in enumerate(groups):
            rows = [
                _batches.batch_row(row, integration.target, uid, clearing) for row, uid in group
            ]
            answer, problem = await self._send(integration, pretend, batch_no, rows, dry_run=True)
            if answer is None:
                raise ScoutError(f"the command service would not say: {problem}")
            for row_answer in answer.rows:
                outcomes[_ROW_OUTCOMES.get(row_answer.outcome, "problem")] += 1
                if row_answer.outcome != command_pb2.ROW_OUTCOME_UNCHANGED:
                    answers.append(row_answer)
        answers.sort(key=lambda a: a.position)
        return answers, dict(outcomes)

    # -- steps ----------------------------------------------------------------------------

    async def _fetchrow(self, query: str, *args: Any) -> Any:
        async with self.pool.acquire() as conn:
            return await conn.fetchrow(QUERIES[query], *args)

    async def _fetchval(self, query: str, *args: Any) -> Any:
        async with self.pool.acquire() as conn:
            return await conn.fetchval(QUERIES[query], *args)

    async def _execute(self, query: str, *args: Any) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(QUERIES[query], *args)

    async def _integration(self, integration_id: str) -> Integration:
        row = await self._outlast(
            f"integration {integration_id}", lambda: self._fetchrow("integration", integration_id)
        )
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
            settings=dict(row["settings"] or {}),
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
        return await self._outlast(
            f"recording run {run.id}",
            lambda: self._record_once(integration, job, run, status, reason),
        )

    async def _record_once(
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
        finished_at = run.finished_at
        row = await self._outlast(
            f"runs newer than {run.id}",
            lambda: self._fetchrow("newer_applied_run", integration.id, finished_at, run.build),
        )
        return None if row is None else str(row[0])

    async def _apply(
        self,
        integration: Integration,
        version: MappingVersion,
        run_id: str,
        items: list[Any],
        scout_run: ScoutRun,
        job: Job,
    ) -> RunResult:
        mapped, key_state, ready, _skipped, unit_ids = await self._outlast(
            f"run {scout_run.id}: mapping",
            lambda: self._prepare(integration, version, items),
        )
        # Scout's rows are not needed once mapped (mapping copies what it keeps): let them go
        # before the batches, the biggest part of a large run's memory.
        items.clear()
        clearing = _batches.Clearing.of(version)
        if not job.past_guards:
            stop, sized = await self._outlast(
                f"run {scout_run.id}: checks",
                lambda: self._guards(integration, scout_run, mapped, ready, unit_ids, clearing),
            )
            await self._outlast(
                f"run {scout_run.id}: size", lambda: self._execute("set_sized", run_id, sized)
            )
            if stop is not None:
                await self._finish(run_id, "paused_by_guard", stop, Counter())
                question = f"Run {scout_run.id} was paused: {stop} Start it to write it anyway."

                async def ask() -> None:
                    async with self.pool.acquire() as conn:
                        await open_review(
                            conn, integration.id, "guard", scout_run.id, question, run_id
                        )

                await self._outlast(f"run {scout_run.id}: review", ask)
                return RunResult("paused_by_guard", run_id, stop)
        else:
            # A person's Start does not make a short run pass: what its guards found stands.
            sized = await self._outlast(
                f"run {scout_run.id}: size", lambda: self._fetchval("run_sized", run_id)
            )
        # Only a full run that passed the size check by itself lists every key (seed: "Only
        # runs that passed the size check count"). One a person started past the check may be
        # a broken read: counting the keys it left out as missing would ask about them all.
        complete = scout_run.build == "all" and sized is True
        # Each row is counted once, by its position, whatever the attempts: a resumed run sends
        # its saved batches again (they answer duplicate, with their rows' answers), and by then
        # the fast path would skip those rows too. A row's answer replaces what it was before.
        # The fast path's rows are "fast_path" (unchanged, skipped early) and nothing else.
        sent = {row.position for row in ready}
        counted: dict[int, str] = {
            row.position: row.outcome
            if row.outcome != "ok"
            else ("not_sent" if row.position in sent else "fast_path")
            for row in mapped
        }
        held_reasons: dict[int, str] = {}
        await self._outlast(
            f"run {scout_run.id}: row log",
            lambda: self._log_mapping(integration, run_id, mapped),
        )
        groups = await self._outlast(
            f"run {scout_run.id}: batches",
            lambda: self._batches(integration, run_id, mapped, ready, unit_ids, key_state),
        )
        failures: list[str] = []

        def account(
            batch_no: int,
            rows: list[command_pb2.BatchRow],
            answer: command_pb2.BatchAnswer | None,
            problem: str,
        ) -> None:
            if answer is None:
                failures.append(f"batch {batch_no}: {problem}")
                for row in rows:
                    counted[row.position] = "not_sent"
                    key_state.forget(row.key)
                return
            hashes = {row.key: row.hash for row in rows}
            for row_answer in answer.rows:
                outcome = _ROW_OUTCOMES.get(row_answer.outcome, "problem")
                counted[row_answer.position] = outcome
                if outcome == "held":
                    held_reasons[row_answer.position] = row_answer.reason
                if outcome in _PLACED:
                    key_state.written(
                        row_answer.key,
                        hashes.get(row_answer.key),
                        row_answer.subject_id,
                        row_answer.applied_seq,
                    )
                else:
                    key_state.forget(row_answer.key)

        # A run's batches name disjoint units, so a few can be in flight at once: the command
        # service and PostgreSQL work on one while this process prepares the next. Each batch's
        # messages are built when it is sent and dropped once its answer is counted, so a big
        # run never holds them all.
        queue = iter(enumerate(groups))
        handed_over = False

        async def sender() -> None:
            nonlocal handed_over
            for batch_no, group in queue:
                if self.stopping.is_set():
                    # The batches in flight finish; this one and the rest are another copy's.
                    handed_over = True
                    return
                rows = [
                    _batches.batch_row(row, integration.target, uid, clearing) for row, uid in group
                ]
                answer, problem = await self._send(integration, run_id, batch_no, rows)
                account(batch_no, rows, answer, problem)

        await asyncio.gather(*(sender() for _ in range(self.settings.import_batches_in_flight)))
        if handed_over:
            raise HandedOver(run_id)
        key_state.loaded_for_run = run_id
        outcomes: Counter[str] = Counter(counted.values())
        await self._outlast(
            f"run {scout_run.id}: settle", lambda: self._settle(integration, scout_run, mapped)
        )
        await self._outlast(
            f"run {scout_run.id}: held rows",
            lambda: self._held_reviews(
                integration, run_id, mapped, counted, held_reasons, complete
            ),
        )
        if not failures and complete:
            # Not tried again: it counts the runs a key has been missing, and a repeat after a
            # lost answer would count this one twice.
            await self._mark_missing(integration, run_id, mapped, key_state)
        if failures:
            failures.sort(key=lambda text: int(text.split(":")[0].removeprefix("batch ")))
            reason = (
                f"{len(failures)} of {len(groups)} batches could not be saved "
                f"({'; '.join(failures[:3])}). The saved ones stay; the others are sent again "
                "when the run resumes."
            )
            await self._finish(run_id, "partly_done", reason, outcomes)
            return RunResult("partly_done", run_id, reason, outcomes)
        await self._finish(run_id, "done", None, outcomes)
        return RunResult("done", run_id, None, outcomes)

    async def _prepare(
        self, integration: Integration, version: MappingVersion, items: list[Any]
    ) -> tuple[list[MappedRow], KeyStateCache, list[MappedRow], int, dict[str, str]]:
        """The run mapped, the key state, the rows to send (not skipped by the fast path),
        how many were skipped, and the units the rows name."""
        async with self.pool.acquire() as conn:
            mapped = await _map(conn, integration, version, items)
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
            unit_ids = await _unit_ids(conn, integration, ready)
        return mapped, key_state, ready, skipped, unit_ids

    async def _guards(
        self,
        integration: Integration,
        scout_run: ScoutRun,
        mapped: list[MappedRow],
        ready: list[MappedRow],
        unit_ids: dict[str, str],
        clearing: _batches.Clearing,
    ) -> tuple[str | None, bool | None]:
        """The first guard that stops this run, in plain words (None when all pass), and
        whether it passed the size check (None for a page run, which has none)."""
        limits = guards.Limits.of(self.settings, integration.settings)
        async with self.pool.acquire() as conn:
            history = [
                r["row_count"]
                for r in await conn.fetch(
                    QUERIES["usual_row_counts"], integration.id, scout_run.build, limits.usual_runs
                )
            ]
            ids = [
                i
                for i in (
                    r.value.get("unit_id") or unit_ids.get(str(r.value.get("code"))) for r in ready
                )
                if i
            ]
            current = (
                {row["id"]: dict(row) for row in await conn.fetch(QUERIES["current_units"], ids)}
                if integration.target == "unit" and ids
                else {}
            )
        unplaceable = (
            0
            if integration.creates_units or integration.target != "unit"
            else sum(
                1
                for r in mapped
                if r.outcome == "ok"
                and not (r.value.get("unit_id") or unit_ids.get(str(r.value.get("code"))))
            )
        )
        too_few = (
            guards.too_few(len(mapped), guards.usual_rows(history, limits), limits)
            if scout_run.build != "page"
            else None
        )
        checks = (
            too_few,
            guards.unusable(mapped, limits),
            guards.not_placed_or_held(mapped, unplaceable, limits),
            guards.cleared_and_reopened(ready, current, unit_ids, clearing, limits),
        )
        stop = next((reason for reason in checks if reason is not None), None)
        return stop, (too_few is None if scout_run.build != "page" else None)

    async def _settle(
        self, integration: Integration, scout_run: ScoutRun, mapped: list[MappedRow]
    ) -> None:
        """Official rows open their settle window; a page run moves its keys on."""
        now = datetime.now(UTC)
        official = [
            row.key
            for row in mapped
            if row.key and row.outcome == "ok" and row.value.get("status") == "OFFICIAL"
        ]
        async with self.pool.acquire() as conn:
            if official:
                await conn.execute(
                    QUERIES["mark_official"],
                    integration.id,
                    official,
                    settle.first_read(now, self.settings),
                    now,
                )
            if scout_run.build == "page":
                listed = [row.key for row in mapped if row.key]
                settling = await conn.fetch(QUERIES["settling"], integration.id, listed)
                if settling:
                    await conn.execute(
                        QUERIES["settle_listed"],
                        integration.id,
                        [row["subject_key"] for row in settling],
                        [
                            settle.next_read(row["official_at"], now, self.settings)
                            for row in settling
                        ],
                    )

    async def _mark_missing(
        self,
        integration: Integration,
        run_id: str,
        mapped: list[MappedRow],
        key_state: KeyStateCache,
    ) -> None:
        """After a full run: count keys it no longer lists; two runs in a row asks a person."""
        listed = {row.key for row in mapped if row.key}
        missing = [
            key
            for key, state in key_state.keys.items()
            if key not in listed and state.subject_id is not None
        ]
        back = [key for key in listed if key_state.missing.get(key)]
        if not missing and not back:
            return
        needed = int(
            integration.settings.get("missing_runs_to_review", self.settings.missing_runs_to_review)
        )
        auto_cancel = bool(
            integration.settings.get("auto_cancel_missing", self.settings.auto_cancel_missing)
        )
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(QUERIES["mark_missing"], integration.id, missing, back)
            # A key listed again is not missing: its question closes by itself.
            listed_again = [row["subject_key"] for row in rows if row["missing_runs"] == 0]
            await conn.execute(
                QUERIES["close_reviews"], integration.id, "missing", listed_again, "import"
            )
            for row in rows:
                key_state.missing[row["subject_key"]] = row["missing_runs"]
                if row["missing_runs"] < needed:
                    continue
                question = (
                    f"Scout's last {row['missing_runs']} full runs no longer list "
                    f"{row['subject_key']}. Cancel it, or dismiss this if it is still on."
                )
                await open_review(
                    conn,
                    integration.id,
                    "missing",
                    row["subject_key"],
                    question,
                    run_id,
                    row["subject_id"],
                )
                if auto_cancel and row["subject_id"]:
                    await self._cancel(integration, row["subject_key"], row["subject_id"])

    async def _cancel(self, integration: Integration, key: str, unit_id: str) -> None:
        """auto_cancel_missing: the same command a person would send, never a direct write."""
        payload = struct_pb2.Struct()
        payload.update({"status": "CANCELLED"})
        answer = await self.command.Submit(
            command_pb2.Command(
                command_id=f"{integration.code}:missing:{key}",
                code="results.set_status",
                subject=command_pb2.Subject(kind="unit", id=unit_id),
                payload=payload,
                actor=actor_pb2.Actor(
                    kind=actor_pb2.Actor.KIND_INTEGRATION,
                    name=f"integration:{integration.code}",
                    source_code=integration.code,
                    screen="imports:missing",
                ),
            ),
            timeout=self.settings.grpc_deadline_seconds,
        )
        log.info(
            "missing %s: cancel answered %s %s",
            key,
            command_pb2.Outcome.Name(answer.outcome),
            answer.reason,
        )

    async def _batches(
        self,
        integration: Integration,
        run_id: str,
        mapped: list[MappedRow],
        ready: list[MappedRow],
        unit_ids: dict[str, str],
        key_state: KeyStateCache,
    ) -> list[list[tuple[MappedRow, str | None]]]:
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
        return groups

    async def _key_state(self, conn: asyncpg.Connection, integration: Integration) -> KeyStateCache:
        """This process's key state of the integration, brought up to date.

        Loaded whole when first used or when the last applied run was not ours (another copy
        of this process ran it); otherwise only the records changed since are read.
        """
        cache = self.key_states.get(integration.id)
        last = await conn.fetchval(QUERIES["last_applied_run"], integration.id)
        if cache is None or cache.loaded_for_run != last or cache.target != integration.target:
            cache = KeyStateCache(
                integration.id,
                integration.target,
                self.settings.fastpath_lag_seconds,
                self.settings.fastpath_blind_seconds,
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
        *,
        dry_run: bool = False,
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
            dry_run=dry_run,
            actor=actor_pb2.Actor(
                kind=actor_pb2.Actor.KIND_INTEGRATION,
                name=f"integration:{integration.code}",
                source_code=integration.code,
                screen="imports",
            ),
        )
        # Tried again for as long as a failover takes: a batch command id is its run and number,
        # so a batch saved before a lost answer answers duplicate and nothing is written twice.
        settings = self.settings
        started = time.monotonic()
        deadline = started + settings.batch_retry_seconds
        wait = settings.batch_retry_first_seconds
        problem = ""
        tries = 0
        while True:
            tries += 1
            try:
                answer: command_pb2.BatchAnswer = await self.command.ApplyImportBatch(
                    batch, timeout=settings.grpc_deadline_seconds
                )
            except grpc.aio.AioRpcError as exc:
                problem = f"the command service answered {exc.code().name}: {exc.details()}"
                if exc.code() not in _PASSING_CODES:
                    break
            else:
                if answer.outcome in (command_pb2.OUTCOME_ACCEPTED, command_pb2.OUTCOME_DUPLICATE):
                    return answer, ""
                if answer.outcome == command_pb2.OUTCOME_REFUSED:
                    return None, f"refused: {answer.reason}"
                problem = answer.reason or "try again"
            if time.monotonic() + wait > deadline:
                break
            log.info("run %s batch %s: %s; trying again in %.1f s", run_id, batch_no, problem, wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, settings.batch_retry_max_seconds)
        return None, f"{problem} ({tries} tries in {time.monotonic() - started:.0f} s)"

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

    async def _held_reviews(
        self,
        integration: Integration,
        run_id: str,
        mapped: list[MappedRow],
        counted: dict[int, str],
        held_reasons: dict[int, str],
        complete: bool,
    ) -> None:
        """Waiting for you: one open question per key this run held, by the mapping or by the
        command service; a key no longer held closes its own. So does one a complete run no
        longer lists: its question is about a row Scout does not send any more."""
        held: dict[str, str] = {}
        answered: set[str] = set()
        for row in mapped:
            if not row.key:
                continue
            outcome = counted.get(row.position)
            if outcome == "held":
                held[row.key] = held_reasons.get(row.position) or row.reason
            elif outcome != "not_sent":
                answered.add(row.key)
        async with self.pool.acquire() as conn, conn.transaction():
            for key, question in held.items():
                await open_review(conn, integration.id, "held", key, question, run_id)
            await conn.execute(
                QUERIES["close_reviews"],
                integration.id,
                "held",
                sorted(answered.difference(held)),
                "import",
            )
            listed = [row.key for row in mapped if row.key]
            if complete and listed:
                await conn.execute(
                    QUERIES["close_unlisted_reviews"], integration.id, "held", listed, "import"
                )

    async def _finish(
        self, run_id: str, status: str, reason: str | None, outcomes: Counter[str]
    ) -> None:
        async def close() -> None:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(QUERIES["finish_run"], run_id, status, reason, dict(outcomes))
                if status in _NO_LONGER_PAUSED:
                    await conn.execute(QUERIES["close_outdated_guards"], run_id)

        await self._outlast(f"run {run_id}: close", close)


async def _map(
    conn: asyncpg.Connection, integration: Integration, version: MappingVersion, items: list[Any]
) -> list[MappedRow]:
    """Map a run's rows with the integration's lookups, the cycle collector paused: mapping
    makes no reference cycles, and tens of thousands of new rows would set it off for nothing."""
    lookups: dict[str, dict[str, str]] = {}
    for row in await conn.fetch(QUERIES["lookups"], integration.id):
        lookups.setdefault(row["kind"], {})[row["external_id"]] = row["our_id"]
    context = MappingContext(integration.time_zone, lookups)
    paused = gc.isenabled()
    gc.disable()
    try:
        return version.map_rows(items, context)
    finally:
        if paused:
            gc.enable()


async def _unit_ids(
    conn: asyncpg.Connection, integration: Integration, ready: list[MappedRow]
) -> dict[str, str]:
    """Our ids of the units the rows name by code, for placing and sorting the batches."""
    codes = [str(row.value.get("code")) for row in ready if row.value.get("code")]
    if integration.target != "unit" or not codes:
        return {}
    return dict(await conn.fetch(QUERIES["unit_ids_by_code"], integration.id, codes))


def _day(day: str | None) -> date | None:
    try:
        return date.fromisoformat(day) if day else None
    except ValueError:
        return None
