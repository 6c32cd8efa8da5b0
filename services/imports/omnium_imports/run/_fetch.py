"""The first stages: Scout's run fetched with its rows, then the run on record.

A run Scout failed, one we cannot read, one done already and one older than a run applied
already end here, each on record with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from omnium_imports import _runs
from omnium_imports._queue import Job
from omnium_imports._runs import Integration
from omnium_imports._scout import ScoutError, ScoutPage, ScoutRun
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappingSpecError, MappingVersion
from omnium_imports.run._context import Context, RunResult

# Runs in these states take no more work: a new attempt finds them and stops.
FINISHED = frozenset({"done", "scout_failed", "older"})


@dataclass(frozen=True, slots=True)
class Fetched:
    """Scout's run, the mapping version it is read with, and its pages of rows."""

    scout_run: ScoutRun
    version: MappingVersion
    pages: list[ScoutPage]


async def fetch(ctx: Context, integration: Integration, job: Job) -> Fetched | RunResult:
    """Scout's run and its rows, read with no transaction open: Scout may be slow. A run Scout
    failed, or one we cannot read, ends here, on record."""
    found = await _find_scout_run(ctx, integration, job)
    if isinstance(found, RunResult):
        return found
    return await _read_scout_run(ctx, integration, job, found)


async def record(ctx: Context, integration: Integration, job: Job, scout_run: ScoutRun) -> str:
    """The run on record as received: our id of it."""
    return await on_record(ctx, integration, job, scout_run, "received", None)


async def overtaken(
    ctx: Context, integration: Integration, scout_run: ScoutRun, run_id: str
) -> RunResult | None:
    """A run older than one applied already ends here, `older`."""
    if scout_run.finished_at is None:
        return None
    older = await ctx.db(
        f"runs newer than {scout_run.id}",
        lambda conn: _runs.newer_applied(conn, integration, scout_run),
    )
    if older is None:
        return None
    return await ctx.end(
        run_id,
        "older",
        f"run {scout_run.id} is older than run {older}, which was applied already",
    )


async def on_record(
    ctx: Context,
    integration: Integration,
    job: Job,
    scout_run: ScoutRun,
    status: str,
    reason: str | None,
) -> str:
    """The run on record with this status (and reason); our id of it."""
    return await ctx.db(
        f"recording run {scout_run.id}",
        lambda conn: _runs.record(conn, integration, job, scout_run, status, reason),
        transaction=True,
    )


async def _find_scout_run(ctx: Context, integration: Integration, job: Job) -> ScoutRun | RunResult:
    """The run the job names, or Scout's newest of the integration's job."""
    if integration.state != "on" and job.via != "operator":
        return RunResult("skipped", reason=f"the integration is {integration.state}")
    scout_run: ScoutRun | None
    try:
        if job.kind == "pull" and job.scout_run_id:
            scout_run = await ctx.scout.run(integration.base_url, job.scout_run_id)
        else:
            # A check takes the newest run whatever its status, so a failing Scout is seen.
            scout_run = await ctx.scout.newest_run(integration.base_url, integration.job)
    except ScoutError as exc:
        if job.scout_run_id is None:
            return RunResult("failed", reason=str(exc))
        # The doorbell named the run: it goes on record as failed, with Scout's answer.
        unread = ScoutRun.unread(job.scout_run_id, integration.job)
        run_id = await on_record(ctx, integration, job, unread, "failed", str(exc))
        return RunResult("failed", run_id, str(exc))
    if scout_run is None:
        return RunResult("nothing_new", reason="Scout has no run of this job yet")
    return scout_run


async def _read_scout_run(
    ctx: Context, integration: Integration, job: Job, scout_run: ScoutRun
) -> Fetched | RunResult:
    """The run's rows and the mapping they go through, unless the run was done already or
    Scout failed it."""
    known = await ctx.db(
        f"run {scout_run.id}",
        lambda conn: conn.fetchrow(QUERIES["find_run"], integration.id, scout_run.id),
    )
    if known is not None and known["status"] in FINISHED:
        if known["status"] == "older":
            # A Start of a run a newer one overtook: a question about it still open (a copy
            # slow to ask it) is closed, as its run's end would have closed it.
            await ctx.db(
                "review",
                lambda conn: conn.execute(QUERIES["close_outdated_guards"], known["id"]),
            )
        return RunResult(
            "nothing_new", known["id"], f"run {scout_run.id} is already {known['status']}"
        )

    async def ended(status: str, reason: str) -> RunResult:
        return RunResult(
            status, await on_record(ctx, integration, job, scout_run, status, reason), reason
        )

    if scout_run.status == "failed":
        reason = f"Scout's run {scout_run.id} failed its own checks: {scout_run.reason or '?'}"
        return await ended("scout_failed", reason)
    try:
        version = MappingVersion.parse(integration.spec or {})
    except MappingSpecError as exc:
        reason = f"the integration's mapping (version {integration.version}) is broken: {exc}"
        return await ended("failed", reason)
    try:
        seen = ctx.page_memory(integration.id).seen()
        pages = await ctx.scout.pages(integration.base_url, scout_run, seen)
    except ScoutError as exc:
        return await ended("failed", str(exc))
    return Fetched(scout_run, version, pages)
