"""ImportsService over gRPC: two-line health, runs and their detail, Waiting for you and its
actions, pause and resume, and a dry run that writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest

from omnium.common.v1 import actor_pb2
from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium_grpc import open_channel
from tests.support.command import person
from tests.support.imports import MEDALS, SCHEDULE, GamesDay, games_day


@asynccontextmanager
async def operator(day: GamesDay) -> AsyncIterator[imports_pb2_grpc.ImportsServiceStub]:
    channel = open_channel(f"127.0.0.1:{day.imports.grpc_port}", day.imports.settings)
    try:
        yield imports_pb2_grpc.ImportsServiceStub(channel)
    finally:
        await channel.close()


async def test_cards_runs_and_a_run_s_detail(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(first.id)
        unit = day.sim.reference()["units"][0]
        day.sim.reschedule(unit["externalId"], venue="Nagoya Dome")
        second = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(second.id)
        cards = (
            await ops.ListIntegrations(imports_pb2.ListIntegrationsRequest(), timeout=10)
        ).integrations
        runs = (
            await ops.ListRuns(imports_pb2.ListRunsRequest(integration_code=SCHEDULE), timeout=10)
        ).runs
        detail = await ops.GetRun(imports_pb2.GetRunRequest(run_id=ours["id"]), timeout=10)
        first_id = await day.db.fetchval(
            "SELECT id::text FROM integration_run WHERE scout_run_id = $1", first.id
        )
        short = await ops.GetRun(
            imports_pb2.GetRunRequest(run_id=first_id, rows_per_section=3), timeout=10
        )
        failed = await day.sim.make_run("schedule", fail_checks="site down", wait_doorbell=True)
        await day.wait_for_run(failed.id)
        after = {
            c.code: c
            for c in (
                await ops.ListIntegrations(imports_pb2.ListIntegrationsRequest(), timeout=10)
            ).integrations
        }
    card = next(c for c in cards if c.code == SCHEDULE)
    assert (card.scout.word, card.scout.ok) == ("Passed", True)
    assert (card.omnium.word, card.omnium.ok) == ("On time", True)
    assert [r.status for r in runs] == ["done", "done"]
    assert runs[0].batch_done == runs[0].batch_total == 1
    assert [e.key for e in detail.changed] == [unit["externalId"]]
    assert [(c.field, c.new.string_value) for c in detail.changed[0].changes] == [
        ("venue", "Nagoya Dome")
    ]
    assert (detail.changed_total, detail.kept_by_hand_total, detail.held_total) == (1, 0, 0)
    # A first load changes every unit: three are listed, all are counted.
    assert (len(short.changed), short.changed_total) == (3, 1252)
    assert (after[SCHEDULE].scout.word, after[SCHEDULE].scout.ok) == ("Failed its checks", False)
    assert "site down" in after[SCHEDULE].scout.detail


async def test_waiting_for_you_and_its_actions(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(first.id)
        gone = day.sim.reference()["units"][5]
        day.sim.drop(gone["externalId"])
        for _ in range(2):
            run = await day.sim.make_run("schedule", wait_doorbell=True)
            await day.wait_for_run(run.id)
        waiting = (await ops.ListWaiting(imports_pb2.ListWaitingRequest(), timeout=10)).items
        assert [(w.kind, w.subject_key) for w in waiting] == [("missing", gone["externalId"])]
        done = await ops.ResolveMissing(
            imports_pb2.ResolveMissingRequest(
                item_id=waiting[0].id, cancel=True, actor=person("Mei", screen="admin:waiting")
            ),
            timeout=10,
        )
        status = await day.db.fetchval("SELECT status FROM unit WHERE code = $1", gone["rsc"])
        actor = await day.db.fetchval(
            "SELECT actor_name || ' @ ' || screen FROM timeline_item WHERE code = "
            "'results.set_status'"
        )
        left = (await ops.ListWaiting(imports_pb2.ListWaitingRequest(), timeout=10)).items
    assert done.done and status == "CANCELLED"
    assert actor == "Mei @ admin:waiting"
    assert left == []


async def test_pause_resume_and_run_now(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        paused = await ops.SetIntegrationState(
            imports_pb2.SetIntegrationStateRequest(
                integration_code=SCHEDULE, state="paused", actor=person()
            ),
            timeout=10,
        )
        delivery = await day.sim.ring((await day.sim.make_run("schedule")).id)
        await ops.SetIntegrationState(
            imports_pb2.SetIntegrationStateRequest(
                integration_code=SCHEDULE, state="on", actor=person()
            ),
            timeout=10,
        )
        now = await ops.RunNow(imports_pb2.RunNowRequest(integration_code=SCHEDULE), timeout=10)
        await day.jobs_idle()
        units = await day.db.fetchval("SELECT count(*) FROM unit")
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await ops.SetIntegrationState(
                imports_pb2.SetIntegrationStateRequest(
                    integration_code=SCHEDULE, state="asleep", actor=person()
                ),
                timeout=10,
            )
    assert paused.done
    assert delivery.answer["queued"] is False
    assert now.done and units == 1252
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_dry_run_answers_the_diff_and_writes_nothing(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(first.id)
        unit = day.sim.reference()["units"][7]
        day.sim.reschedule(unit["externalId"], venue="Somewhere New")
        day.sim.mute_doorbell(True)
        stored = await day.sim.make_run("schedule")
        commands = await day.db.fetchval("SELECT count(*) FROM command")
        answer = await ops.DryRun(
            imports_pb2.DryRunRequest(integration_code=SCHEDULE, scout_run_id=stored.id), timeout=60
        )
        after = await day.db.fetchval("SELECT count(*) FROM command")
        venue = await day.db.fetchval("SELECT venue FROM unit WHERE code = $1", unit["rsc"])
        # A run Scout does not have: the operator is told so, as a refusal, not a bug.
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await ops.DryRun(
                imports_pb2.DryRunRequest(integration_code=SCHEDULE, scout_run_id="run-nope"),
                timeout=60,
            )
    assert unknown.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "the dry run could not be made" in (unknown.value.details() or "")
    assert [(r.key, r.outcome) for r in answer.rows] == [(unit["externalId"], "accepted")]
    assert [(c.field, c.new.string_value) for c in answer.rows[0].changes] == [
        ("venue", "Somewhere New")
    ]
    assert answer.outcomes["unchanged"] == 1251
    assert after == commands and venue != "Somewhere New"


async def test_a_check_that_cannot_read_scout_turns_the_card_failing(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(first.id)
        day.sim.fail_next(1000, path_prefix="/v1/")
        await ops.RunNow(imports_pb2.RunNowRequest(integration_code=SCHEDULE), timeout=10)
        await day.jobs_idle()
        failing = await _card(ops)
        day.sim.clear_faults()
        again = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(again.id)
        back = await _card(ops)
    assert (failing.omnium.word, failing.omnium.ok) == ("Failing", False)
    assert "HTTP 500" in failing.omnium.detail
    assert [a.kind for a in failing.open_alerts] == ["run_failed"]
    assert (back.omnium.word, back.omnium.ok) == ("On time", True)
    assert list(back.open_alerts) == []


async def test_a_missing_key_cancel_carries_the_account_and_screen(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(first.id)
        day.sim.drop(day.sim.reference()["units"][3]["externalId"])
        for _ in range(2):
            run = await day.sim.make_run("schedule", wait_doorbell=True)
            await day.wait_for_run(run.id)
        item = (await ops.ListWaiting(imports_pb2.ListWaitingRequest(), timeout=10)).items[0]
        await ops.ResolveMissing(
            imports_pb2.ResolveMissingRequest(
                item_id=item.id,
                cancel=True,
                actor=actor_pb2.Actor(
                    kind=actor_pb2.Actor.KIND_PERSON,
                    name="Mei Lin",
                    source_code="account:42",
                    screen="admin:waiting",
                ),
            ),
            timeout=10,
        )
        actor = await day.db.fetchrow(
            "SELECT actor_name, source_code, screen FROM timeline_item "
            "WHERE code = 'results.set_status'"
        )
    assert tuple(actor) == ("Mei Lin", "account:42", "admin:waiting")


async def test_an_operator_s_action_without_the_acting_person_is_refused(
    database_url: str,
) -> None:
    """StartRun, ResolveMissing and pause or resume record who did them: without a person (or
    with only the old `by`, or without a screen) nothing is done, and no "operator" stands in."""
    async with games_day(database_url) as day, operator(day) as ops:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(first.id)
        day.sim.drop(day.sim.reference()["units"][4]["externalId"])
        for _ in range(2):
            run = await day.sim.make_run("schedule", wait_doorbell=True)
            await day.wait_for_run(run.id)
        item = (await ops.ListWaiting(imports_pb2.ListWaitingRequest(), timeout=10)).items[0]
        no_screen = person("Mei Lin", screen="")
        calls = {
            "ResolveMissing": lambda actor, by: ops.ResolveMissing(
                imports_pb2.ResolveMissingRequest(item_id=item.id, cancel=True, actor=actor, by=by),
                timeout=10,
            ),
            "SetIntegrationState": lambda actor, by: ops.SetIntegrationState(
                imports_pb2.SetIntegrationStateRequest(
                    integration_code=SCHEDULE, state="paused", actor=actor, by=by
                ),
                timeout=10,
            ),
            "StartRun": lambda actor, by: ops.StartRun(
                imports_pb2.StartRunRequest(run_id=str(ours["id"]), actor=actor, by=by),
                timeout=10,
            ),
        }
        refused: dict[str, list[str]] = {}
        for method, call in calls.items():
            for actor, by in ((None, ""), (None, "Mei Lin"), (no_screen, "")):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call(actor, by)
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
                refused.setdefault(method, []).append(caught.value.details() or "")
        state = await day.db.fetchval("SELECT state FROM integration WHERE code = $1", SCHEDULE)
        still = (await ops.ListWaiting(imports_pb2.ListWaitingRequest(), timeout=10)).items
        written = await day.db.fetchval(
            "SELECT count(*) FROM timeline_item WHERE code = 'results.set_status'"
        )
    assert state == "on" and [w.id for w in still] == [item.id] and written == 0
    for method, details in refused.items():
        assert all(f"{method} is a person's action" in d for d in details), details
        assert "actor.name is empty" in details[0] and "actor.name is empty" in details[1]
        assert "`by` alone is no longer taken" in details[1]
        assert "actor.screen is empty" in details[2]


async def _card(ops: imports_pb2_grpc.ImportsServiceStub) -> imports_pb2.Integration:
    cards = (
        await ops.ListIntegrations(imports_pb2.ListIntegrationsRequest(), timeout=10)
    ).integrations
    return next(c for c in cards if c.code == SCHEDULE)


async def test_a_card_just_added_is_not_due_yet_until_its_interval_is_over(
    database_url: str,
) -> None:
    """The demo's medal card said "Late" from the first minute: an integration with no run
    yet is late only once a check interval since it was added is over."""
    async with games_day(database_url) as day, operator(day) as ops:

        async def cards() -> dict[str, imports_pb2.Integration]:
            answer = await ops.ListIntegrations(imports_pb2.ListIntegrationsRequest(), timeout=10)
            return {c.code: c for c in answer.integrations}

        fresh = (await cards())[MEDALS]
        run = await day.sim.make_run("medals", wait_doorbell=True)
        await day.wait_for_run(run.id)
        read = (await cards())[MEDALS]
        # The same integration, added an interval ago and still without a run: late.
        await day.db.execute(
            "UPDATE integration SET created_at = now() - interval '11 minutes' WHERE code = $1",
            SCHEDULE,
        )
        late = (await cards())[SCHEDULE]
    assert (fresh.scout.word, fresh.omnium.word, fresh.omnium.ok) == (
        "No run yet",
        "Not due yet",
        False,
    )
    assert "due within 600 s" in fresh.omnium.detail
    assert (read.scout.word, read.omnium.word, read.omnium.ok) == ("Passed", "On time", True)
    assert (late.omnium.word, late.omnium.detail) == ("Late", "no run yet")
