"""The guards: a run they stop is paused before anything is written, with a question to a
person, and Start runs it past them."""

from __future__ import annotations

from dataclasses import dataclass

from omnium_imports import _guards as guards
from omnium_imports._queue import Job
from omnium_imports._review import open_review
from omnium_imports._runs import Integration
from omnium_imports._scout import ScoutRun
from omnium_imports._sql import QUERIES
from omnium_imports.run._context import Context, RunResult
from omnium_imports.run._map import Mapped, Ready


@dataclass(frozen=True, slots=True)
class Checked:
    """The run passed its guards (or a person started it past them). `complete`: a full run
    that passed the size check by itself, so it lists every key."""

    complete: bool


async def check(
    ctx: Context,
    integration: Integration,
    job: Job,
    scout_run: ScoutRun,
    run_id: str,
    mapped: Mapped,
    ready: Ready,
) -> Checked | RunResult:
    """The guards, once: a run one stops is paused, with a question to a person."""
    label = f"run {scout_run.id}"
    if job.past_guards:
        # A person's Start does not make a short run pass: what its guards found stands.
        sized = await ctx.db(
            f"{label}: size", lambda conn: conn.fetchval(QUERIES["run_sized"], run_id)
        )
    else:
        limits = guards.Limits.of(ctx.settings, integration.settings)
        stop, sized = await ctx.db(
            f"{label}: checks",
            lambda conn: guards.first_stop(
                conn,
                integration,
                scout_run.build,
                mapped.rows,
                ready.rows,
                ready.unit_ids,
                mapped.clearing,
                limits,
            ),
        )
        await ctx.db(
            f"{label}: size", lambda conn: conn.execute(QUERIES["set_sized"], run_id, sized)
        )
        if stop is not None:
            result = await ctx.end(run_id, "paused_by_guard", stop)
            question = f"Run {scout_run.id} was paused: {stop} Start it to write it anyway."
            await ctx.db(
                f"{label}: review",
                lambda conn: open_review(
                    conn, integration.id, "guard", scout_run.id, question, run_id
                ),
            )
            return result
    # Only a full run that passed the size check by itself lists every key, so only such runs
    # count keys as missing. One a person started past the check may be a broken read:
    # counting the keys it left out as missing would ask about them all.
    return Checked(complete=scout_run.build == "all" and sized is True)
