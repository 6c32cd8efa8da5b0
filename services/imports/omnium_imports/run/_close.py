"""The last stages, once the batches are sent: the settle window, the held rows, the missing
keys, and the run closed."""

from __future__ import annotations

from collections import Counter

from omnium_imports import _missing, _send
from omnium_imports import _settle as settle
from omnium_imports._review import ask_about_held
from omnium_imports._runs import Integration
from omnium_imports._scout import ScoutRun
from omnium_imports.run._context import Context, RunResult, StageError
from omnium_imports.run._guard import Checked
from omnium_imports.run._map import Mapped
from omnium_imports.run._write import Planned, Sent


async def settle_window(
    ctx: Context, integration: Integration, scout_run: ScoutRun, mapped: Mapped
) -> None:
    """Official rows open their settle window; a page run moves its keys on."""
    await ctx.db(
        f"run {scout_run.id}: settle",
        lambda conn: settle.open_windows(
            conn, ctx.settings, integration.id, scout_run.build, mapped.rows, scout_run.finished_at
        ),
    )


async def held_rows(
    ctx: Context,
    integration: Integration,
    scout_run: ScoutRun,
    run_id: str,
    mapped: Mapped,
    checked: Checked,
    sent: Sent,
) -> None:
    """Waiting for you: a question per key this run held; those no longer held close."""
    await ctx.db(
        f"run {scout_run.id}: held rows",
        lambda conn: ask_about_held(
            conn,
            integration.id,
            run_id,
            mapped.rows,
            sent.counted,
            sent.held_reasons,
            checked.complete,
        ),
        transaction=True,
    )


async def missing(
    ctx: Context,
    integration: Integration,
    scout_run: ScoutRun,
    run_id: str,
    mapped: Mapped,
    checked: Checked,
    sent: Sent,
) -> None:
    """After a full run that saved every batch: count the keys it no longer lists, in one short
    transaction tried again like the others (a repeat for the same run counts nothing twice),
    then send the cancels the integration asks for, each tried again like a batch."""
    if sent.failures or not checked.complete:
        return
    gone, back = _missing.changes(mapped.rows, mapped.key_state)
    if not gone and not back:
        return
    settings, label = ctx.settings, f"run {scout_run.id}"
    needed = int(
        integration.settings.get("missing_runs_to_review", settings.imports.missing_runs_to_review)
    )
    auto_cancel = bool(
        integration.settings.get("auto_cancel_missing", settings.imports.auto_cancel_missing)
    )
    counts, asked = await ctx.db(
        f"{label}: missing keys",
        lambda conn: _missing.mark(conn, integration.id, run_id, gone, back, needed),
        transaction=True,
    )
    mapped.key_state.missing.update(counts)
    if not auto_cancel:
        return
    problems = []
    for key in asked:
        problem = await _send.withdraw(
            ctx.command, settings, integration, key.key, key.subject_id, key.medal_ref
        )
        if problem:
            problems.append(f"the cancel of {key.key} could not be sent ({problem})")
            continue
        await ctx.db(
            f"{label}: missing key cancelled",
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


async def close(ctx: Context, run_id: str, planned: Planned, sent: Sent) -> RunResult:
    """The run closed: done, or partly done with the batches that could not be saved."""
    outcomes: Counter[str] = Counter(sent.counted.values())
    if sent.failures:
        failures = sorted(
            sent.failures, key=lambda text: int(text.split(":")[0].removeprefix("batch "))
        )
        reason = (
            f"{len(failures)} of {len(planned.batches)} batches could not be saved "
            f"({'; '.join(failures[:3])}). The saved ones stay; the others are sent again "
            "when the run resumes."
        )
        await ctx.finish(run_id, "partly_done", reason, outcomes)
        return RunResult("partly_done", run_id, reason, outcomes)
    await ctx.finish(run_id, "done", None, outcomes)
    return RunResult("done", run_id, None, outcomes)
