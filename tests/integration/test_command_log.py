"""Who and from where, and the outbox: one row per change, announced by NOTIFY."""

from __future__ import annotations

import asyncio

import asyncpg

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from tests.support.command import import_batch, person, running_command, unit_row
from tests.support.games import EVENT, make_games, make_run

OUT = command_pb2


async def test_actor_and_screen_are_on_the_timeline(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    unit = games.units[0]
    async with running_command(database_url) as client:
        answer = await client.submit(
            command_id="t-1",
            code="results.set_status",
            unit_id=unit,
            payload={"status": "DELAYED"},
            actor=person("Mei Chen", "admin:unit-edit"),
        )
        assert answer.outcome == OUT.OUTCOME_ACCEPTED
        run_id = await make_run(db, games)
        await client.batch(import_batch(run_id, 0, [unit_row(0, unit, venue="Nagoya Dome")]))
        timeline = await client.stub.GetTimeline(
            command_pb2.GetTimelineRequest(subject=command_pb2.Subject(kind="unit", id=unit)),
            timeout=10,
        )
        by_code = await client.stub.GetTimeline(
            command_pb2.GetTimelineRequest(
                subject=command_pb2.Subject(
                    kind="unit", code=games.unit_codes[unit], event_code=EVENT
                )
            ),
            timeout=10,
        )
        event = await client.stub.GetTimeline(
            command_pb2.GetTimelineRequest(subject=command_pb2.Subject(kind="event", code=EVENT)),
            timeout=10,
        )
    newest, oldest = timeline.items
    assert oldest.actor.name == "Mei Chen"
    assert oldest.actor.kind == actor_pb2.Actor.KIND_PERSON
    assert oldest.actor.screen == "admin:unit-edit"
    assert oldest.actor.source_code == "account:7"
    assert [(d.field, d.old.string_value, d.new.string_value) for d in oldest.diff] == [
        ("status", "SCHEDULED", "DELAYED")
    ]
    assert newest.actor.kind == actor_pb2.Actor.KIND_INTEGRATION
    assert newest.actor.name == "integration:scout-fbl"
    assert newest.code == "imports.apply_batch"
    assert [i.id for i in by_code.items] == [i.id for i in timeline.items]
    assert len(event.items) == 2
    row = await db.fetchrow(
        "SELECT actor_name, screen, source_code FROM timeline_item WHERE command_id = 't-1'"
    )
    assert dict(row) == {
        "actor_name": "Mei Chen",
        "screen": "admin:unit-edit",
        "source_code": "account:7",
    }


async def test_a_units_timeline_shows_only_its_part_of_a_batch(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=3)
    mine, other, third = games.units
    async with running_command(database_url) as client:
        run_id = await make_run(db, games)
        await client.batch(
            import_batch(
                run_id,
                0,
                [
                    unit_row(0, mine, venue="Hall A"),
                    unit_row(1, other, venue="Hall B"),
                    unit_row(2, third, venue="Hall C"),
                ],
            )
        )
        ours = await client.stub.GetTimeline(
            command_pb2.GetTimelineRequest(subject=command_pb2.Subject(kind="unit", id=mine)),
            timeout=10,
        )
        run = await client.stub.GetTimeline(
            command_pb2.GetTimelineRequest(
                subject=command_pb2.Subject(kind="integration_run", id=run_id)
            ),
            timeout=10,
        )
    (item,) = ours.items
    assert item.code == "imports.apply_batch"
    assert [(d.subject_id, d.field, d.new.string_value) for d in item.diff] == [
        (mine, "venue", "Hall A")
    ]
    # The run's own timeline still holds the whole batch.
    (whole,) = run.items
    assert sorted(d.new.string_value for d in whole.diff) == ["Hall A", "Hall B", "Hall C"]


async def test_one_outbox_row_per_change_and_a_notify(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=5)
    run_id = await make_run(db, games)
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(database_url)
    await listener.add_listener("omnium_domain_event", lambda *args: heard.put_nowait(args[3]))
    try:
        rows = [
            unit_row(i, unit, status="RUNNING" if i < 3 else "SCHEDULED")
            for i, unit in enumerate(games.units)
        ]
        async with running_command(database_url) as client:
            answer = await client.batch(import_batch(run_id, 0, rows))
        payload = await asyncio.wait_for(heard.get(), timeout=5)
    finally:
        await listener.close()
    assert answer.outcome == OUT.OUTCOME_ACCEPTED
    events = await db.fetch(
        "SELECT id, kind, subject_id::text, seq, payload FROM domain_event ORDER BY id"
    )
    assert [e["kind"] for e in events] == ["unit.changed"] * 3
    assert {e["subject_id"] for e in events} == set(games.units[:3])
    assert {e["seq"] for e in events} == {answer.seq}
    assert events[0]["payload"]["changes"] == [
        {"field": "status", "old": "SCHEDULED", "new": "RUNNING"}
    ]
    # One notification for the statement, naming the newest outbox id.
    assert payload == str(events[-1]["id"])
    assert heard.empty()
