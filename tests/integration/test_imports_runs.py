"""The agreed run end to end: Scout's doorbell to our data, through the command service."""

from __future__ import annotations

from tests.support.imports import games_day


async def test_a_games_day_flows_in(database_url: str) -> None:
    async with games_day(database_url) as day:
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(run.id)
        assert ours["status"] == "done", ours["reason"]
        units = await day.db.fetchval("SELECT count(*) FROM unit")
        assert units == run.row_count == 1252
        assert await day.db.fetchval("SELECT count(*) FROM unit_competitor") > 2 * 1252
        assert ours["batch_total"] == ours["batch_done"] == -(-1252 // 25)
        assert ours["outcomes"] == {"accepted": 1252}
