"""Callers with names and roles, on real servers: each role's allowed and refused calls, the
timeline naming the real caller, a person's screen required, and a token rotated."""

from __future__ import annotations

import asyncpg
import grpc
import pytest

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_grpc import open_channel
from tests.support.command import (
    ADMIN_TOKEN,
    CALLERS,
    FEED_TOKEN,
    GATEWAY_TOKEN,
    STATS_TOKEN,
    TOKEN,
    CommandClient,
    command,
    import_batch,
    person,
    running_command,
    unit_row,
)
from tests.support.games import make_games, make_run
from tests.support.imports import games_day
from tests.support.scoring import MINA, action, assign, running_scoring, scorer
from tests.support.sessions import session_metadata, signed_in

OK = "OK"
DENIED = grpc.StatusCode.PERMISSION_DENIED.name
TIMELINE = command_pb2.GetTimelineRequest(subject=command_pb2.Subject(kind="event", code="AG2026"))


def _stub(
    client: CommandClient, token: str
) -> tuple[grpc.aio.Channel, command_pb2_grpc.CommandServiceStub]:
    channel = open_channel(f"127.0.0.1:{client.port}", client.settings, token=token)
    return channel, command_pb2_grpc.CommandServiceStub(channel)


async def _status(call: object) -> tuple[str, str]:
    """OK, or the status code's name, and the details."""
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code().name, exc.details() or ""
    return OK, ""


async def _timeline(db: asyncpg.Connection, command_id: str) -> tuple[str, ...] | None:
    row = await db.fetchrow(
        "SELECT actor_kind, actor_name, source_code, screen FROM timeline_item "
        "WHERE command_id = $1",
        command_id,
    )
    return None if row is None else tuple(row)


async def test_each_role_s_calls_on_the_command_service(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=10)
    run_id = await make_run(db, games)
    claimed = person("Aiko Tanaka")  # every caller below claims to be this person
    # The consoles send the signed-in person's session; the others send none.
    olga = "00000000-0000-4000-8000-0000000000a1"
    sessions = {"admin-console": session_metadata(await signed_in(db, "Olga", "operator", olga))}
    said: dict[tuple[str, str], tuple[str, str]] = {}
    callers = {
        "omnium-tests": TOKEN,
        "admin-console": ADMIN_TOKEN,
        "gateway": GATEWAY_TOKEN,
        "results-feed": FEED_TOKEN,
        "stats-team": STATS_TOKEN,
    }
    async with running_command(database_url) as client:
        for n, (name, token) in enumerate(callers.items()):
            channel, stub = _stub(client, token)
            said[name, "Submit"] = await _status(
                stub.Submit(
                    command(
                        f"{name}:status",
                        "results.set_status",
                        {"status": "RUNNING"},
                        unit_id=games.units[n],
                        actor=claimed,
                    ),
                    timeout=10,
                    metadata=sessions.get(name, ()),
                )
            )
            said[name, "Submit units.set_fields"] = await _status(
                stub.Submit(
                    command(
                        f"{name}:fields",
                        "units.set_fields",
                        {"fields": {"venue": f"{name} hall"}},
                        unit_id=games.units[5 + n],
                        actor=claimed,
                    ),
                    timeout=10,
                    metadata=sessions.get(name, ()),
                )
            )
            batch = import_batch(run_id, n, [unit_row(1, games.units[5 + n], venue="Arena")])
            said[name, "ApplyImportBatch"] = await _status(stub.ApplyImportBatch(batch, timeout=10))
            said[name, "GetTimeline"] = await _status(stub.GetTimeline(TIMELINE, timeout=10))
            await channel.close()
    allowed = {key for key, (code, _) in said.items() if code == OK}
    assert allowed == {
        ("omnium-tests", "Submit"),
        ("omnium-tests", "Submit units.set_fields"),
        ("omnium-tests", "ApplyImportBatch"),
        ("omnium-tests", "GetTimeline"),
        ("admin-console", "Submit"),
        ("admin-console", "Submit units.set_fields"),
        ("admin-console", "GetTimeline"),
        ("results-feed", "Submit"),
        ("stats-team", "GetTimeline"),
    }
    assert {code for key, (code, _) in said.items() if key not in allowed} == {DENIED}
    # Refusals say who, what role and what it may not do, in plain words.
    details = said["stats-team", "Submit"][1]
    assert "caller 'stats-team' has the role 'reader', which may only read" in details
    assert "may not call Submit of omnium.command.v1.CommandService" in details
    assert (
        "'gateway' has the role 'scorer-console', which may not call Submit"
        in (said["gateway", "Submit"][1])
    )
    assert (
        "may send only medals.set_row, results.set_sides, results.set_status; not "
        in (said["results-feed", "Submit units.set_fields"][1])
    )
    # The timeline names the real caller: a feed is recorded as itself, whoever it claims.
    assert await _timeline(db, "results-feed:status") == (
        "provider",
        "results-feed",
        "caller:results-feed",
        "admin:unit-edit",
    )
    # The console's command names the person whose session it sent, whoever it claims.
    assert await _timeline(db, "admin-console:status") == (
        "person",
        "Olga",
        f"account:{olga}",
        "admin:unit-edit",
    )
    assert await _timeline(db, "stats-team:status") is None
    assert await _timeline(db, "results-feed:fields") is None
    statuses = await db.fetch("SELECT status FROM unit WHERE id = ANY($1::uuid[])", games.units[:5])
    assert sorted(r["status"] for r in statuses).count("RUNNING") == 3


async def test_a_console_naming_no_person_acts_for_its_signed_in_person(
    database_url: str, db: asyncpg.Connection
) -> None:
    """The operators' console acts for people only: a command it sends as an integration is the
    signed-in person's, and the log says so (without a session it is refused:
    tests/security/test_least_privilege.py)."""
    games = await make_games(db, units=1)
    robot = actor_pb2.Actor(
        kind=actor_pb2.Actor.KIND_INTEGRATION,
        name="integration:scout-fbl",
        source_code="scout-fbl",
        screen="admin:units",
    )
    olga = "00000000-0000-4000-8000-0000000000a1"
    session = session_metadata(await signed_in(db, "Olga", "operator", olga))
    async with running_command(database_url) as client:
        channel, stub = _stub(client, ADMIN_TOKEN)
        answer = await stub.Submit(
            command(
                "posing",
                "results.set_status",
                {"status": "RUNNING"},
                unit_id=games.units[0],
                actor=robot,
            ),
            timeout=10,
            metadata=session,
        )
        await channel.close()
    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED
    assert await _timeline(db, "posing") == ("person", "Olga", f"account:{olga}", "admin:units")


async def test_a_person_s_command_without_a_screen_is_invalid_and_writes_nothing(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    async with running_command(database_url) as client:
        said = {}
        for kind in (actor_pb2.Actor.KIND_PERSON, actor_pb2.Actor.KIND_SCORER):
            actor = actor_pb2.Actor(kind=kind, name="Aiko Tanaka", source_code="account:7")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await client.stub.Submit(
                    command(
                        f"no-screen-{kind}",
                        "results.set_status",
                        {"status": "RUNNING"},
                        unit_id=games.units[0],
                        actor=actor,
                    ),
                    timeout=10,
                )
            said[kind] = (caught.value.code(), caught.value.details() or "")
    for code, details in said.values():
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "actor.screen is empty: a person's command says which screen" in details
    assert await db.fetchval("SELECT count(*) FROM command") == 0
    assert await db.fetchval("SELECT count(*) FROM timeline_item") == 0


async def test_both_tokens_of_a_caller_being_rotated_work_and_name_the_same_caller(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    rotating = (*CALLERS, "results-feed:provider:test-token-feed-new")
    async with running_command(database_url, grpc_callers=rotating) as client:
        answers = []
        for n, token in enumerate((FEED_TOKEN, "test-token-feed-new")):
            channel, stub = _stub(client, token)
            answers.append(
                await stub.Submit(
                    command(
                        f"rotated-{n}",
                        "results.set_status",
                        {"status": "RUNNING"},
                        unit_id=games.units[n],
                        actor=person("Somebody Else"),
                    ),
                    timeout=10,
                )
            )
            await channel.close()
        channel, stub = _stub(client, "test-token-retired")
        gone = await _status(stub.GetTimeline(TIMELINE, timeout=10))
        await channel.close()
    assert [a.outcome for a in answers] == [command_pb2.OUTCOME_ACCEPTED] * 2
    for n in range(2):
        assert (await _timeline(db, f"rotated-{n}"))[:2] == ("provider", "results-feed")  # type: ignore[index]
    assert gone[0] == grpc.StatusCode.UNAUTHENTICATED.name


async def test_each_role_s_calls_on_the_scoring_service(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)  # the scorer may score the match: only the caller is checked
    # The consoles send their signed-in person's session: Mina for the gateway.
    sessions = {
        "gateway": session_metadata(await signed_in(db, "Mina Park", "scorer", MINA)),
        "admin-console": session_metadata(await signed_in(db, "Olga", "operator")),
    }
    said: dict[tuple[str, str], str] = {}
    async with running_scoring(database_url) as scoring:
        callers = {
            "gateway": GATEWAY_TOKEN,
            "admin-console": ADMIN_TOKEN,
            "results-feed": FEED_TOKEN,
            "stats-team": STATS_TOKEN,
        }
        for name, token in callers.items():
            channel = open_channel(f"127.0.0.1:{scoring.port}", scoring.settings, token=token)
            stub = scoring_pb2_grpc.ScoringServiceStub(channel)
            said[name, "Act"] = (
                await _status(
                    stub.Act(
                        scoring_pb2.ActRequest(
                            action=action(unit, f"{name}:1", "start_period"), actor=scorer()
                        ),
                        timeout=30,
                        metadata=sessions.get(name, ()),
                    )
                )
            )[0]
            said[name, "GetMatchState"] = (
                await _status(
                    stub.GetMatchState(
                        scoring_pb2.GetMatchStateRequest(unit_id=unit),
                        timeout=10,
                        metadata=sessions.get(name, ()),
                    )
                )
            )[0]
            await channel.close()
    assert {key for key, code in said.items() if code == OK} == {
        ("gateway", "Act"),
        ("gateway", "GetMatchState"),
        ("admin-console", "GetMatchState"),
        ("results-feed", "GetMatchState"),
        ("stats-team", "GetMatchState"),
    }
    assert {code for code in said.values() if code != OK} == {DENIED}
    # The scorer the gateway signed in is who the log names, through scoring to the road.
    assert await _timeline(db, "gateway:1") == (
        "scorer",
        "Mina Park",
        f"account:{MINA}",
        "scorer-console",
    )


async def test_each_role_s_calls_on_the_imports_service(
    database_url: str, db: asyncpg.Connection
) -> None:
    olga = session_metadata(await signed_in(db, "Olga", "operator"))
    async with games_day(database_url) as day:
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(first.id)
        said: dict[tuple[str, str], str] = {}
        for name, token in {
            "admin-console": ADMIN_TOKEN,
            "gateway": GATEWAY_TOKEN,
            "stats-team": STATS_TOKEN,
        }.items():
            channel = open_channel(
                f"127.0.0.1:{day.imports.grpc_port}", day.imports.settings, token=token
            )
            stub = imports_pb2_grpc.ImportsServiceStub(channel)
            said[name, "GetRun"] = (
                await _status(stub.GetRun(imports_pb2.GetRunRequest(run_id=str(ours["id"]))))
            )[0]
            said[name, "StartRun"] = (
                await _status(
                    stub.StartRun(
                        imports_pb2.StartRunRequest(
                            run_id=str(ours["id"]), actor=person(screen="admin:runs")
                        ),
                        timeout=10,
                        metadata=olga if name == "admin-console" else (),
                    )
                )
            )[0]
            await channel.close()
    # admin-console's Start reaches the run (done, so there is nothing to start: an answer).
    assert said == {
        ("admin-console", "GetRun"): OK,
        ("admin-console", "StartRun"): OK,
        ("gateway", "GetRun"): DENIED,
        ("gateway", "StartRun"): DENIED,
        ("stats-team", "GetRun"): OK,
        ("stats-team", "StartRun"): DENIED,
    }
