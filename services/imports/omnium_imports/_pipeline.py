"""The agreed run, stage by stage: fetch, record, map, fast path, guards, batches, send,
settle, held rows, missing, close.

`run_stages` takes one job's run through the stages in that order, each a function over one
`Run`; a stage that ends the run returns its result. `Pipeline` holds what a process shares
between runs: the pool, Scout's client, the command service and the key state.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
import httpx

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_db import DATABASE_ERRORS, outlast
from omnium_imports import _batches, _dryrun, _missing, _runs, _send
from omnium_imports import _guards as guards
from omnium_imports import _settle as settle
from omnium_imports._keystate import KeyStateCache, up_to_date
from omnium_imports._pages import PageMemory
from omnium_imports._queue import Job
from omnium_imports._review import Alerts, ask_about_held, open_review, tell_of_run
from omnium_imports._run import (
    HandedOver,
    Run,
    RunResult,
    StageError,
    count_batch,
    failure_reason,
)
from omnium_imports._runs import Integration
from omnium_imports._scout import ScoutClient, ScoutError, ScoutRun
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappingContext, MappingSpecError, MappingVersion
from omnium_settings import Settings
from omnium_telemetry import continued_span, tracer

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# Runs in these states take no more work: a new attempt finds them and stops.
FINISHED = frozenset({"done", "scout_failed", "older"})
# Not the end of a run: another copy continues it (handed over, or after the lease).
_NOT_AN_END: tuple[type[BaseException], ...] = (HandedOver, *DATABASE_ERRORS)
# Stages whose span takes the design's word for them ("guards", not the function's name).
_STAGE_SPANS = {"map_rows": "map", "check": "guards", "cut_batches": "batches"}

__all__ = ["HandedOver", "Pipeline", "Run", "RunResult", "run_stages"]


async def run_stages(pipeline: Pipeline, integration: Integration, job: Job) -> RunResult:
    """One job's run, stage by stage, until a stage ends it (close always does)."""
    run = Run(pipeline, integration, job)
    stages: tuple[Callable[[Run], Awaitable[RunResult | None]], ...] = (
        fetch,
        record,
        map_rows,
        fast_path,
        check,
        cut_batches,
        send,
        settle_window,
        held_rows,
        missing,
        close,
    )
    spans = tracer("omnium.imports")
    for stage in stages:
        # One span per stage, named as the design names it: where a run spends its time.
        name = _STAGE_SPANS.get(stage.__name__, stage.__name__)
        try:
            with spans.start_as_current_span(f"imports.{name}") as span:
                result = await stage(run)
                if result is not None:
                    span.set_attribute("omnium.run.status", result.status)
        except _NOT_AN_END:
            # Another copy continues the run (handed over, or after the lease): not an end.
            raise
        except Exception as exc:
            return await _stage_failed(run, name, exc)
        if result is not None:
            return result
    raise AssertionError("the close stage always ends the run")


async def _stage_failed(run: Run, stage: str, exc: Exception) -> RunResult:
    """Every stage runs inside the run's error handling: an error ends the run failed, on
    record with its reason (and so with an alert), never left "Running"."""
    run_id: str | None = getattr(run, "id", None)
    reason = failure_reason(run_id, stage, exc)
    if run_id is None:
        return RunResult("failed", reason=reason)
    outcomes = Counter(getattr(run, "counted", {}).values())
    await run.pipeline.finish(run_id, "failed", reason, outcomes)
    return RunResult("failed", run_id, reason, outcomes)


async def fetch(run: Run) -> RunResult | None:
    """Scout's run and its rows, read with no transaction open: Scout may be slow. A run Scout
    failed, or one we cannot read, ends here, on record."""
    ended = await _find_scout_run(run)
    if ended is not None:
        return ended
    return await _read_scout_run(run)


async def _find_scout_run(run: Run) -> RunResult | None:
    """The run the job names, or Scout's newest of the integration's job."""
    integration, job = run.integration, run.job
    if integration.state != "on" and job.via != "operator":
        return RunResult("skipped", reason=f"the integration is {integration.state}")
    client = run.pipeline.scout
    scout_run: ScoutRun | None
    try:
        if job.kind == "pull" and job.scout_run_id:
            scout_run = await client.run(integration.base_url, job.scout_run_id)
        else:
            # A check takes the newest run whatever its status, so a failing Scout is seen.
            scout_run = await client.newest_run(integration.base_url, integration.job)
    except ScoutError as exc:
        if job.scout_run_id is None:
            return RunResult("failed", reason=str(exc))
        # The doorbell named the run: it goes on record as failed, with Scout's answer.
        run.scout_run = ScoutRun.unread(job.scout_run_id, integration.job)
        return RunResult("failed", await run.on_record("failed", str(exc)), str(exc))
    if scout_run is None:
        return RunResult("nothing_new", reason="Scout has no run of this job yet")
    run.scout_run = scout_run
    return None


async def _read_scout_run(run: Run) -> RunResult | None:
    """The run's rows and the mapping they go through, unless the run was done already or
    Scout failed it."""
    integration, scout_run, client = run.integration, run.scout_run, run.pipeline.scout
    known = await run.pipeline.db(
        f"run {scout_run.id}",
        lambda conn: conn.fetchrow(QUERIES["find_run"], integration.id, scout_run.id),
    )
    if known is not None and known["status"] in FINISHED:
        if known["status"] == "older":
            # A Start of a run a newer one overtook: a question about it still open (a copy
            # slow to ask it) is closed, as its run's end would have closed it.
            await run.pipeline.db(
                "review",
                lambda conn: conn.execute(QUERIES["close_outdated_guards"], known["id"]),
            )
        return RunResult(
            "nothing_new", known["id"], f"run {scout_run.id} is already {known['status']}"
        )
    if scout_run.status == "failed":
        reason = f"Scout's run {scout_run.id} failed its own checks: {scout_run.reason or '?'}"
        return RunResult("scout_failed", await run.on_record("scout_failed", reason), reason)
    try:
        run.version = MappingVersion.parse(integration.spec or {})
    except MappingSpecError as exc:
        reason = f"the integration's mapping (version {integration.version}) is broken: {exc}"
        return RunResult("failed", await run.on_record("failed", reason), reason)
    try:
        seen = run.pipeline.page_memory(integration.id).seen()
        run.pages = await client.pages(integration.base_url, scout_run, seen)
    except ScoutError as exc:
        return RunResult("failed", await run.on_record("failed", str(exc)), str(exc))
    return None


async def record(run: Run) -> RunResult | None:
    """The run on record as received; one older than a run applied already ends here."""
    run.id = await run.on_record("received", None)
    integration, scout_run = run.integration, run.scout_run
    if scout_run.finished_at is None:
        return None
    older = await run.pipeline.db(
        f"runs newer than {scout_run.id}",
        lambda conn: _runs.newer_applied(conn, integration, scout_run),
    )
    if older is None:
        return None
    return await run.end(
        "older", f"run {scout_run.id} is older than run {older}, which was applied already"
    )


async def map_rows(run: Run) -> RunResult | None:
    """Scout's rows mapped to ours: pure code, with the integration's lookups. A page sent
    again byte for byte whose rows the fast path would skip is not mapped again (_pages.py),
    except in a resumed run, whose saved batches go again with their rows' whole values."""
    integration = run.integration

    async def state(conn: asyncpg.Connection) -> tuple[MappingContext, bool]:
        run.key_state = await run.pipeline.key_state(conn, integration)
        resumed = await conn.fetchval(QUERIES["run_plan"], run.id) is not None
        return await _runs.mapping_context(conn, integration), resumed

    context, resumed = await run.db("mapping", state)
    memory = run.pipeline.page_memory(integration.id)
    skippable = None if resumed else run.key_state.skippable
    run.mapped = _runs.paused_gc(
        lambda: memory.map(run.pages, run.version, integration.spec or {}, context, skippable)
    )
    run.pages = []  # Scout's rows are not needed once mapped: let them go before the batches
    if memory.reused:
        log.info(
            "run %s: %d of %d rows came from pages seen before and were not mapped again",
            run.scout_run.id,
            memory.reused,
            len(run.mapped),
        )
    run.clearing = _batches.Clearing.of(run.version)
    return None


async def fast_path(run: Run) -> RunResult | None:
    """The rows whose key state says they are written as they are: not sent again. Nor are
    the keys a newer run wrote (a page run, say, while this one waited to resume): newer data
    wins, and those rows end `older`."""
    skippable = run.key_state.skippable
    run.newer = dict(
        await run.db(
            "newer runs",
            lambda conn: conn.fetch(QUERIES["keys_of_newer_runs"], run.integration.id, run.id),
        )
    )
    run.ready = [
        row
        for row in run.mapped
        if row.outcome == "ok" and not skippable(row.key, row.hash) and row.key not in run.newer
    ]
    run.unit_ids = await run.db(
        "mapping", lambda conn: _runs.unit_ids(conn, run.integration, run.ready)
    )
    return None


async def check(run: Run) -> RunResult | None:
    """The guards, once: a run one stops is paused, with a question to a person."""
    if run.job.past_guards:
        # A person's Start does not make a short run pass: what its guards found stands.
        sized = await run.db("size", lambda conn: conn.fetchval(QUERIES["run_sized"], run.id))
    else:
        limits = guards.Limits.of(run.settings, run.integration.settings)
        stop, sized = await run.db(
            "checks",
            lambda conn: guards.first_stop(
                conn,
                run.integration,
                run.scout_run.build,
                run.mapped,
                run.ready,
                run.unit_ids,
                run.clearing,
                limits,
            ),
        )
        await run.db("size", lambda conn: conn.execute(QUERIES["set_sized"], run.id, sized))
        if stop is not None:
            result = await run.end("paused_by_guard", stop)
            question = f"Run {run.scout_run.id} was paused: {stop} Start it to write it anyway."
            await run.db(
                "review",
                lambda conn: open_review(
                    conn, run.integration.id, "guard", run.scout_run.id, question, run.id
                ),
            )
            return result
    # Only a full run that passed the size check by itself lists every key (seed: "Only
    # runs that passed the size check count"). One a person started past the check may be
    # a broken read: counting the keys it left out as missing would ask about them all.
    run.complete = run.scout_run.build == "all" and sized is True
    return None


async def cut_batches(run: Run) -> RunResult | None:
    """The mapping's held and problem rows logged, and the rest cut into numbered batches."""
    # Each row is counted once, by its position, whatever the attempts: a resumed run sends
    # its saved batches again (they answer duplicate, with their rows' answers), and by then
    # the fast path would skip those rows too. A row's answer replaces what it was before.
    # The fast path's rows are "fast_path" (unchanged, skipped early) and nothing else.
    sent = {row.position for row in run.ready}
    run.counted = {
        row.position: row.outcome
        if row.outcome != "ok"
        else (
            "not_sent"
            if row.position in sent
            else ("older" if row.key in run.newer else "fast_path")
        )
        for row in run.mapped
    }
    await run.db(
        "row log",
        lambda conn: _runs.log_mapping(conn, run.integration, run.id, run.mapped),
        transaction=True,
    )
    run.groups = await run.db(
        "batches",
        lambda conn: _runs.plan(
            conn,
            run.id,
            run.integration.target,
            run.mapped,
            run.ready,
            run.unit_ids,
            run.settings.database.batch_max_units,
            set(run.newer),
        ),
    )
    if run.newer:
        log.info(
            "run %s: %d keys were written by newer runs (%s) and are left as they are",
            run.scout_run.id,
            len(run.newer),
            ", ".join(sorted(set(run.newer.values()))[:3]),
        )
    return None


async def send(run: Run) -> RunResult | None:
    """The batches through the command service, a few in flight at once.

    A run's batches name disjoint units, so the command service and PostgreSQL work on one
    while this process prepares the next. Each batch's messages are built when it is sent
    and dropped once its answer is counted, so a big run never holds them all.
    """
    integration, pipeline = run.integration, run.pipeline
    queue = iter(enumerate(run.groups))
    handed_over = False

    async def sender() -> None:
        nonlocal handed_over
        for batch_no, group in queue:
            if not group:
                # A planned batch whose every key a newer run wrote since: nothing to send.
                continue
            if pipeline.stopping.is_set():
                # The batches in flight finish; this one and the rest are another copy's.
                handed_over = True
                return
            with tracer("omnium.imports").start_as_current_span(
                "imports.batch", attributes={"omnium.batch.no": batch_no}
            ) as span:
                rows = [
                    _batches.batch_row(row, integration.target, uid, run.clearing)
                    for row, uid in group
                ]
                span.set_attribute("omnium.batch.rows", len(rows))
                answer, problem = await _send.batch(
                    pipeline.command, run.settings, integration, run.id, batch_no, rows
                )
                if problem:
                    span.set_attribute("omnium.batch.problem", problem)
            count_batch(run, batch_no, rows, answer, problem)

    await asyncio.gather(*(sender() for _ in range(run.settings.imports.batches_in_flight)))
    if handed_over:
        raise HandedOver(run.id)
    run.key_state.loaded_for_run = run.id
    return None


async def settle_window(run: Run) -> RunResult | None:
    """Official rows open their settle window; a page run moves its keys on."""
    build = run.scout_run.build
    await run.db(
        "settle",
        lambda conn: settle.open_windows(
            conn, run.settings, run.integration.id, build, run.mapped, run.scout_run.finished_at
        ),
    )
    return None


async def held_rows(run: Run) -> RunResult | None:
    """Waiting for you: a question per key this run held; those no longer held close."""
    await run.db(
        "held rows",
        lambda conn: ask_about_held(
            conn,
            run.integration.id,
            run.id,
            run.mapped,
            run.counted,
            run.held_reasons,
            run.complete,
        ),
        transaction=True,
    )
    return None


async def missing(run: Run) -> RunResult | None:
    """After a full run that saved every batch: count the keys it no longer lists, in one short
    transaction tried again like the others (a repeat for the same run counts nothing twice),
    then send the cancels the integration asks for, each tried again like a batch."""
    if run.failures or not run.complete:
        return None
    gone, back = _missing.changes(run.mapped, run.key_state)
    if not gone and not back:
        return None
    integration, settings = run.integration, run.settings
    needed = int(
        integration.settings.get("missing_runs_to_review", settings.imports.missing_runs_to_review)
    )
    auto_cancel = bool(
        integration.settings.get("auto_cancel_missing", settings.imports.auto_cancel_missing)
    )
    counts, asked = await run.db(
        "missing keys",
        lambda conn: _missing.mark(conn, integration.id, run.id, gone, back, needed),
        transaction=True,
    )
    run.key_state.missing.update(counts)
    if not auto_cancel:
        return None
    problems = []
    for key in asked:
        problem = await _send.withdraw(
            run.pipeline.command, settings, integration, key.key, key.subject_id, key.medal_ref
        )
        if problem:
            problems.append(f"the cancel of {key.key} could not be sent ({problem})")
            continue
        await run.db(
            "missing key cancelled",
            lambda conn, key=key: _missing.answered(  # type: ignore[misc]
                conn, integration.id, key.key, "done", "auto_cancel_missing"
            ),
            transaction=True,
        )
    if problems:
        raise StageError(
            f"Run written, but {'; '.join(problems[:3])}. Nothing saved is lost; the question "
            "stays in Waiting for you: confirm it there once the command service answers again."
        )
    return None


async def close(run: Run) -> RunResult:
    """The run closed: done, or partly done with the batches that could not be saved."""
    outcomes: Counter[str] = Counter(run.counted.values())
    if run.failures:
        failures = sorted(
            run.failures, key=lambda text: int(text.split(":")[0].removeprefix("batch "))
        )
        reason = (
            f"{len(failures)} of {len(run.groups)} batches could not be saved "
            f"({'; '.join(failures[:3])}). The saved ones stay; the others are sent again "
            "when the run resumes."
        )
        await run.pipeline.finish(run.id, "partly_done", reason, outcomes)
        return RunResult("partly_done", run.id, reason, outcomes)
    await run.pipeline.finish(run.id, "done", None, outcomes)
    return RunResult("done", run.id, None, outcomes)


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
        self.page_memories: dict[str, PageMemory] = {}
        self.alerts = Alerts(settings, http)

    async def run_job(self, job: Job) -> RunResult:
        # The run continues the ring's trace (the job row carried it over the queue): every
        # stage and batch is a span under this one.
        with continued_span(
            "imports.job",
            [job.trace_context],
            attributes={"omnium.job.id": job.id, "omnium.job.kind": job.kind},
        ) as span:
            integration = await self._integration(job.integration_id)
            result = await run_stages(self, integration, job)
            span.set_attribute("omnium.run.status", result.status)
            await self.outlast("telling of the run", lambda: self._tell(integration, result))
        return result

    async def outlast(self, what: str, work: Callable[[], Awaitable[_T]]) -> _T:
        """The pipeline's own read or write of its bookkeeping, tried again while the database
        restarts or fails over, so a short outage does not fail the run. Each `work` is safe to
        run twice: one transaction, or writes that come out the same when repeated."""
        settings = self.settings
        return await outlast(
            work,
            what=what,
            seconds=settings.imports.database_retry_seconds,
            first_wait=settings.imports.database_retry_first_seconds,
            max_wait=settings.imports.database_retry_max_seconds,
            log=log,
        )

    async def db(
        self,
        what: str,
        work: Callable[[asyncpg.Connection], Awaitable[_T]],
        *,
        transaction: bool = False,
    ) -> _T:
        """`work` on a connection of its own (in a transaction, if asked), with `outlast`."""

        async def once() -> _T:
            async with self.pool.acquire() as conn:
                if not transaction:
                    return await work(conn)
                async with conn.transaction():
                    return await work(conn)

        return await self.outlast(what, once)

    async def finish(
        self, run_id: str, status: str, reason: str | None, outcomes: Counter[str]
    ) -> None:
        await self.db(
            f"run {run_id}: close",
            lambda conn: _runs.finish(conn, run_id, status, reason, outcomes),
            transaction=True,
        )

    async def _tell(self, integration: Integration, result: RunResult) -> None:
        async with self.pool.acquire() as conn:
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
        found = await self.db(
            f"integration {integration_id}",
            lambda conn: _runs.integration(conn, integration_id),
        )
        if found is None:
            raise LookupError(f"integration {integration_id} is gone")
        return found

    def page_memory(self, integration_id: str) -> PageMemory:
        """The pages of the integration's last run in this process (the fast path before
        mapping). Pure mapping makes it true whoever ran the runs since: no reload needed."""
        return self.page_memories.setdefault(integration_id, PageMemory())

    async def key_state(self, conn: asyncpg.Connection, integration: Integration) -> KeyStateCache:
        """This process's key state of the integration, brought up to date (_keystate.py)."""
        return await up_to_date(self.key_states, conn, integration, self.settings)

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
        return await _dryrun.dry_run(self, integration, scout_run_id, version=version, items=items)
