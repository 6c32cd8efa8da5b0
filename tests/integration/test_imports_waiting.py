"""Waiting for you is true: a question is asked only when its cause holds, and closes by itself
once the cause is gone. Missing keys count only runs that passed the size check on their own."""

from __future__ import annotations

from typing import Any

from omnium_imports._queue import enqueue_start
from tests.support.delivery import query_until
from tests.support.imports import GamesDay, games_day


async def _done(day: GamesDay, job: str = "schedule") -> dict[str, Any]:
    run = await day.sim.make_run(job, wait_doorbell=True)
    ours = dict(await day.wait_for_run(run.id))
    assert ours["status"] == "done", ours["reason"]
    return ours


async def _paused_short_run(day: GamesDay, rows: int) -> dict[str, Any]:
    day.sim.shorten_next_run(rows)
    short = await day.sim.make_run("schedule", wait_doorbell=True)
    paused = dict(await day.wait_for_run(short.id))
    assert paused["status"] == "paused_by_guard", paused["reason"]
    paused["scout_run_id"] = short.id
    return paused


async def _started(day: GamesDay, paused: dict[str, Any]) -> dict[str, Any]:
    """A person presses Start on a paused run: the same run again, past its guards."""
    await enqueue_start(day.db, paused["id"])
    await day.jobs_idle()
    return dict(await day.wait_for_run(paused["scout_run_id"]))


async def _items(day: GamesDay, kind: str, status: str = "open") -> list[str]:
    rows = await day.db.fetch(
        "SELECT subject_key FROM review_item WHERE kind = $1 AND status = $2 ORDER BY id",
        kind,
        status,
    )
    return [row["subject_key"] for row in rows]


async def _missing(day: GamesDay) -> dict[str, int]:
    rows = await day.db.fetch(
        "SELECT subject_key, missing_runs FROM integration_key_state "
        "WHERE integration_id = $1::uuid AND missing_runs > 0",
        day.schedule_id,
    )
    return {row["subject_key"]: row["missing_runs"] for row in rows}


async def test_a_run_started_past_the_size_check_marks_nothing_missing(database_url: str) -> None:
    async with games_day(
        database_url,
        # Were the short runs counted, the second would cancel ~1,200 units by itself.
        import_overrides={"auto_cancel_missing": True},
    ) as day:
        full = await _done(day)
        gone = day.sim.reference()["units"][600]
        day.sim.drop(gone["externalId"])
        # Three 50-row runs, each paused by the size check and started by a person: written,
        # but none lists the Games, so none counts a key as missing. Nor do they become the
        # usual size: were they counted, the median of recent runs would be 50 by the third,
        # and it would pass the check by itself.
        pauses: list[str] = []
        for _ in range(3):
            paused = await _paused_short_run(day, 50)
            pauses.append(paused["reason"])
            started = await _started(day, paused)
            assert started["status"] == "done", started["reason"]
        after_short = await _missing(day)
        missing_items = await _items(day, "missing")
        cancelled = await day.db.fetchval("SELECT count(*) FROM unit WHERE status = 'CANCELLED'")
        # A full run that passed the check on its own does count: only the unit it dropped.
        await _done(day)
        after_full = await _missing(day)
    usual = f"Scout sent 50 rows; it usually sends about {full['row_count']:,}."
    assert [reason.startswith(usual) for reason in pauses] == [True, True, True], pauses
    assert after_short == {}
    assert missing_items == []
    assert cancelled == 0
    assert after_full == {gone["externalId"]: 1}


async def test_a_guard_pause_closes_once_a_newer_run_is_applied(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _done(day)
        paused = await _paused_short_run(day, 100)
        asked = await _items(day, "guard")
        # A newer full run is written: Start on the paused one could only end it older.
        await _done(day)
        after_newer = await _items(day, "guard")
        closed = await day.db.fetchrow(
            "SELECT status, resolved_by FROM review_item WHERE kind = 'guard' AND run_id = $1",
            paused["id"],
        )
        # Started all the same, it ends older and asks nothing again.
        started = await _started(day, paused)
        after_start = await _items(day, "guard")
    assert asked == [paused["scout_run_id"]]
    assert after_newer == []
    assert (closed["status"], closed["resolved_by"]) == ("done", "import")
    assert started["status"] == "older"
    assert after_start == []


async def test_a_guard_pause_closes_when_its_run_ends_older(database_url: str) -> None:
    """The paused run's own question closes when the run ends older, with the import as its
    cause: the path for a question still open although a newer run was applied."""
    async with games_day(database_url) as day:
        await _done(day)
        paused = await _paused_short_run(day, 100)
        newer = await _done(day)
        newer_scout_id = await day.db.fetchval(
            "SELECT scout_run_id FROM integration_run WHERE id = $1::uuid", newer["id"]
        )
        # The newer run closed the question. Open it again, as a copy slow to ask it would have
        # left it (or a version from before newer runs closed such questions).
        await day.db.execute(
            "UPDATE review_item SET status = 'open', resolved_at = NULL, resolved_by = NULL "
            "WHERE kind = 'guard' AND run_id = $1::uuid",
            paused["id"],
        )
        asked = await _items(day, "guard")
        # Start on it can only end it older; that ends its question too.
        started = await _started(day, paused)
        closed = await day.db.fetchrow(
            "SELECT status, resolved_by FROM review_item WHERE kind = 'guard' AND run_id = $1",
            paused["id"],
        )
        after = await _items(day, "guard")
    assert asked == [paused["scout_run_id"]]
    assert started["status"] == "older"
    # The newer run ended it older already, saying which run overtook it.
    assert started["reason"].startswith(
        f"Overtaken by run {newer_scout_id}, newer and written already, so it cannot be started"
    )
    assert (closed["status"], closed["resolved_by"]) == ("done", "import")
    assert after == []


async def test_a_missing_key_listed_again_closes_its_question(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _done(day)
        gone = day.sim.reference()["units"][10]
        day.sim.drop(gone["externalId"])
        for _ in range(2):
            await _done(day)
        asked = await _items(day, "missing")
        day.sim.restore(gone["externalId"])
        # Another copy runs the next run: its key state is read from the database.
        for worker in day.imports.workers:
            worker.pipeline.key_states.clear()
        back = await _done(day)
        still_open = await _items(day, "missing")
        closed = await _items(day, "missing", "done")
        missing_after = await _missing(day)
    assert asked == [gone["externalId"]]
    assert back["outcomes"] == {"fast_path": 1252}  # the unit came back as it was
    assert still_open == []
    assert closed == [gone["externalId"]]
    assert missing_after == {}


async def test_a_held_row_scout_no_longer_sends_closes_its_question(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _done(day)
        unit = next(u for u in day.sim.reference()["units"] if u["disciplineCode"] == "FBL")
        day.sim.swap_competitor(
            unit["externalId"], order=1, competitor_id="SC-T-KOR3", name="Korea B", noc="KOR"
        )
        held = await _done(day)
        asked = await _items(day, "held")
        # Scout drops the unit: a full run no longer lists it, so there is nothing to answer.
        day.sim.drop(unit["externalId"])
        await _done(day)
        after = await _items(day, "held")
    assert held["outcomes"].get("held") == 1
    assert asked == [unit["externalId"]]
    assert after == []


def _podium_final(day: GamesDay) -> str:
    return next(
        unit.external_id
        for unit in day.sim.games.units.values()
        if unit.medals not in ("none", "bronze") and len(unit.contestants) > 3
    )


async def test_a_medal_row_naming_a_noc_we_do_not_know_is_held_until_it_is_known(
    database_url: str,
) -> None:
    async with games_day(database_url) as day:
        final = _podium_final(day)
        day.sim.mark_official(final)
        gold = next(c for c in day.sim.unit(final)["competitors"] if c["medal"] == "GOLD")
        # Scout's site gives the gold to a NOC these Games do not have (a typo, or one not
        # loaded yet): the medal table names it.
        day.sim.swap_competitor(
            final, order=gold["order"], competitor_id="SC-P-XYZ1", name="Ex Why", noc="XYZ"
        )
        day.sim.mark_official(
            final, competitors=[{"externalId": "SC-P-XYZ1", "result": gold["result"], "rank": 1}]
        )
        assert any(row["noc"] == "XYZ" for row in day.sim.medal_table())
        held = await _done(day, "medals")
        logged = await day.db.fetchrow(
            "SELECT outcome, reason FROM integration_row "
            "WHERE run_id = $1::uuid AND subject_key = 'XYZ'",
            held["id"],
        )
        question = await day.db.fetchval(
            "SELECT question FROM review_item WHERE kind = 'held' AND status = 'open' "
            "AND integration_id = $1::uuid AND subject_key = 'XYZ'",
            day.medals_id,
        )
        served = await day.db.fetchval("SELECT count(*) FROM medal_row WHERE noc = 'XYZ'")
        # Someone adds the NOC's competitor (Waiting for you says how): the next run writes it.
        await day.db.execute(
            "INSERT INTO competitor (event_id, kind, code, name, noc) "
            "SELECT id, 'person', 'XYZ-1', 'Ex Why', 'XYZ' FROM event"
        )
        passed = await _done(day, "medals")
        answered = await query_until(
            day.db,
            "SELECT resolved_by FROM review_item WHERE kind = 'held' AND status = 'done' "
            "AND integration_id = $1::uuid AND subject_key = 'XYZ'",
            day.medals_id,
            within=10,
        )
        still_open = await day.db.fetchval(
            "SELECT count(*) FROM review_item WHERE status = 'open' AND integration_id = $1::uuid",
            day.medals_id,
        )
        written = await day.db.fetchrow("SELECT gold, total FROM medal_row WHERE noc = 'XYZ'")
    assert held["outcomes"].get("held") == 1
    assert sum(held["outcomes"].values()) == held["row_count"]
    assert "accepted" in held["outcomes"]  # the other rows of the table are written
    assert logged["outcome"] == "held"
    assert "NOC XYZ" in logged["reason"] and "add its competitors" in logged["reason"]
    assert question == logged["reason"]
    assert served == 0
    assert passed["outcomes"].get("accepted") == 1 and "held" not in passed["outcomes"]
    assert answered == "import"
    assert still_open == 0
    assert tuple(written) == (1, 1)
