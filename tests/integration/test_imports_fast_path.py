"""The fast path: a key is skipped only when its hash is the same AND nobody touched its record."""

from __future__ import annotations

from omnium.command.v1 import command_pb2
from tests.support.command import command, person
from tests.support.imports import games_day


async def test_same_hash_and_untouched_is_skipped_and_a_persons_edit_never_is(
    database_url: str,
) -> None:
    async with games_day(database_url) as day:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        assert (await day.wait_for_run(first.id))["status"] == "done"
        commands_before = await day.db.fetchval("SELECT count(*) FROM command")

        same = await day.sim.make_run("schedule", wait_doorbell=True)
        skipped = await day.wait_for_run(same.id)
        assert skipped["status"] == "done"
        assert skipped["outcomes"] == {"fast_path": 1252}
        assert skipped["batch_total"] == 0
        assert await day.db.fetchval("SELECT count(*) FROM command") == commands_before

        # A person edits one unit between two identical runs: venue stays pinned, status is
        # unpinned again, so the import must restore the status and keep the venue.
        unit = day.sim.reference()["units"][3]
        row = await day.db.fetchrow(
            "SELECT id::text, status, venue FROM unit WHERE code = $1", unit["rsc"]
        )
        edit = await day.command.stub.Submit(
            command(
                "edit",
                "units.set_fields",
                {"fields": {"venue": "Toyota Stadium", "status": "POSTPONED"}},
                unit_id=row["id"],
                actor=person(),
            ),
            timeout=10,
        )
        unpin = await day.command.stub.Submit(
            command(
                "unpin", "units.unpin", {"fields": ["status"]}, unit_id=row["id"], actor=person()
            ),
            timeout=10,
        )
        assert edit.outcome == unpin.outcome == command_pb2.OUTCOME_ACCEPTED

        again = await day.sim.make_run("schedule", wait_doorbell=True)
        restored = await day.wait_for_run(again.id)
        now = await day.db.fetchrow("SELECT status, venue FROM unit WHERE id = $1::uuid", row["id"])
        logged = await day.db.fetchrow(
            "SELECT outcome, diff, kept_by_hand FROM integration_row WHERE run_id = $1::uuid",
            restored["id"],
        )
    assert restored["status"] == "done"
    assert restored["batch_total"] == 1
    # One word per row: the figures add up to the run's rows.
    assert restored["outcomes"] == {"fast_path": 1251, "accepted": 1}
    assert now["status"] == row["status"] and now["venue"] == "Toyota Stadium"
    assert [d["field"] for d in logged["diff"]] == ["status"]
    assert [k["field"] for k in logged["kept_by_hand"]] == ["venue"]


async def test_a_second_process_loads_key_state_it_did_not_write(database_url: str) -> None:
    """Key state is cached per process; a run by another copy makes the cache reload."""
    async with games_day(database_url) as day:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        assert (await day.wait_for_run(first.id))["status"] == "done"
        # Forget this process's cache, as if another copy had run the first run.
        for worker in day.imports.workers:
            worker.pipeline.key_states.clear()
        same = await day.sim.make_run("schedule", wait_doorbell=True)
        skipped = await day.wait_for_run(same.id)
    assert skipped["outcomes"] == {"fast_path": 1252}
