"""Unknown ids are held with a question, tried again on every later run, and go through once
the id is known; a held row is never reported as saved."""

from __future__ import annotations

from omnium_imports import add_lookups
from tests.support.imports import games_day


async def test_a_held_row_goes_through_once_its_team_is_added(database_url: str) -> None:
    async with games_day(database_url) as day:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        assert (await day.wait_for_run(first.id))["status"] == "done"
        unit = next(u for u in day.sim.reference()["units"] if u["disciplineCode"] == "FBL")
        day.sim.swap_competitor(
            unit["externalId"], order=1, competitor_id="SC-T-KOR3", name="Korea B", noc="KOR"
        )
        held_run = await day.sim.make_run("schedule", wait_doorbell=True)
        held = await day.wait_for_run(held_run.id)
        question = await day.db.fetchrow(
            "SELECT outcome, reason, subject_key FROM integration_row WHERE run_id = $1::uuid",
            held["id"],
        )
        still_held = await day.sim.make_run("schedule", wait_doorbell=True)
        again = await day.wait_for_run(still_held.id)
        waiting = await day.db.fetch(
            "SELECT question FROM review_item WHERE kind = 'held' AND status = 'open'"
        )
        # Someone adds the team (Waiting for you) and maps Scout's id to it.
        team = await day.db.fetchval(
            "INSERT INTO competitor (event_id, kind, code, name, noc) "
            "SELECT id, 'team', 'KOR-B', 'Korea B', 'KOR' FROM event RETURNING id::text"
        )
        await add_lookups(day.db, day.schedule_id, "competitor", {"SC-T-KOR3": team})
        passed_run = await day.sim.make_run("schedule", wait_doorbell=True)
        passed = await day.wait_for_run(passed_run.id)
        answered = await day.db.fetchval(
            "SELECT count(*) FROM review_item WHERE kind = 'held' AND status = 'done'"
        )
        side = await day.db.fetchval(
            "SELECT s.competitor_id::text FROM unit_competitor s JOIN unit u ON u.id = s.unit_id "
            "WHERE u.code = $1 AND s.sort_order = 1",
            unit["rsc"],
        )
    assert held["status"] == "done"
    assert held["outcomes"].get("held") == 1 and "accepted" not in held["outcomes"]
    assert question["outcome"] == "held" and question["subject_key"] == unit["externalId"]
    assert "SC-T-KOR3" in question["reason"] and "we have no such competitor" in question["reason"]
    assert again["outcomes"].get("held") == 1
    # One question in Waiting for you however many runs hold the row; it closes when answered.
    assert [w["question"] for w in waiting] == [question["reason"]]
    assert answered == 1
    assert passed["outcomes"].get("accepted") == 1 and "held" not in passed["outcomes"]
    assert side == team
