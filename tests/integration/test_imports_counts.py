"""A run's outcome counts add up to its rows, one outcome per row, however many attempts the
run took; and the console's run page shows figures that add up."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import httpx
import pytest

from omnium_admin import AdminApp
from tests.support.imports import GamesDay, games_day, import_settings

_FIGURE = re.compile(r"<span>([^<:]+): (\d+)</span>")
_ROWS = re.compile(r"<span data-rows>(\d+)</span>")


@asynccontextmanager
async def console(day: GamesDay) -> AsyncIterator[httpx.AsyncClient]:
    """The admin console on the day's imports service, sign-in off (pages read as a viewer)."""
    settings = import_settings(
        day.database_url,
        day.command.port,
        imports_address=f"127.0.0.1:{day.imports.grpc_port}",
        admin_sign_in_required=False,
    )
    app = AdminApp(settings)
    port = await app.start(0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            yield http
    finally:
        await app.stop()


async def run_page_figures(http: httpx.AsyncClient, run_id: str) -> tuple[int, dict[str, int]]:
    """The rows a run page shows, and its outcome figures by their words."""
    page = await http.get(f"/runs/{run_id}")
    assert page.status_code == 200, page.text
    rows = _ROWS.search(page.text)
    outcomes = re.search(r'<p class="outcomes">(.*?)</p>', page.text, re.S)
    assert rows is not None and outcomes is not None, page.text
    figures = _FIGURE.findall(outcomes.group(1))
    words = [word for word, _ in figures]
    assert len(words) == len(set(words)), f"a word shown twice: {words}"
    return int(rows.group(1)), {word: int(n) for word, n in figures}


@pytest.mark.parametrize("resumed_by", ["the same copy", "another copy"])
async def test_a_resumed_run_counts_each_row_once(database_url: str, resumed_by: str) -> None:
    async with games_day(
        database_url,
        command_settings={"import_lock_timeout_seconds": 0.2},
        # One batch gives up after a second, and no resume by itself: this test resumes it.
        import_overrides={"batch_retry_seconds": 1.0, "resume_tries": 0},
    ) as day:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        assert (await day.wait_for_run(first.id))["status"] == "done"
        units = day.sim.reference()["units"]
        for unit in units:
            day.sim.reschedule(unit["externalId"], venue="Moved")
        # One unit's lock held: its batch cannot be saved, the other batches are.
        blocker = await asyncpg.connect(database_url)
        lock = blocker.transaction()
        await lock.start()
        await blocker.execute("SELECT 1 FROM unit WHERE code = $1 FOR UPDATE", units[100]["rsc"])
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        cut = await day.wait_for_run(run.id)
        await lock.rollback()
        await blocker.close()
        async with console(day) as http:
            cut_page = await run_page_figures(http, cut["id"])
            if resumed_by == "another copy":
                # As after kill -9: the copy that continues knows nothing of the first attempt.
                for worker in day.imports.workers:
                    worker.pipeline.key_states.clear()
            await day.db.execute(
                "INSERT INTO integration_job (integration_id, kind, via) "
                "VALUES ($1, 'check', 'test')",
                day.schedule_id,
            )
            await day.db.execute("NOTIFY omnium_import_job")
            await day.jobs_idle()
            resumed = await day.wait_for_run(run.id)
            resumed_page = await run_page_figures(http, resumed["id"])
        changed = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Moved'")
    assert cut["status"] == "partly_done", cut["reason"]
    assert 0 < cut["outcomes"]["not_sent"] < cut["row_count"]
    assert sum(cut["outcomes"].values()) == cut["row_count"] == len(units)
    assert resumed["status"] == "done", resumed["reason"]
    # Saved batches answered duplicate with their rows' answers: each row counted once.
    assert resumed["outcomes"] == {"accepted": len(units)}
    assert changed == len(units)
    rows, figures = cut_page
    assert rows == sum(figures.values()) == len(units)
    assert figures["not written yet"] == cut["outcomes"]["not_sent"]
    assert resumed_page == (len(units), {"changed": len(units)})


async def test_a_fast_path_run_page_adds_up(database_url: str) -> None:
    async with games_day(database_url) as day:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        assert (await day.wait_for_run(first.id))["status"] == "done"
        unit = day.sim.reference()["units"][7]
        day.sim.reschedule(unit["externalId"], venue="One Change Arena")
        second = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(second.id)
        async with console(day) as http:
            rows, figures = await run_page_figures(http, ours["id"])
    assert ours["outcomes"] == {"accepted": 1, "fast_path": 1251}
    # "changed: 1 · unchanged, skipped early: 1251", and no second "unchanged: 1251".
    assert (rows, figures) == (1252, {"changed": 1, "unchanged, skipped early": 1251})
