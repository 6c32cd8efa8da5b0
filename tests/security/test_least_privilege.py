"""Least privilege for gRPC callers: a console acts only for a person whose signed-in session
it sends, and takes nothing else from the call (name, account, role, assignment); servers keep
only the hashes of callers' tokens, and production refuses a token written in clear."""

from __future__ import annotations

import gc
import subprocess
import sys

import asyncpg
import grpc
import httpx
import pytest

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_grpc import Callers, Person, open_channel
from omnium_imports import ImportsApp
from omnium_settings import Settings, deploy_problems
from tests.support.command import (
    ADMIN_TOKEN,
    GATEWAY_TOKEN,
    TOKEN,
    command,
    person,
    running_command,
)
from tests.support.games import make_games, make_run
from tests.support.imports import import_settings
from tests.support.scoring import (
    MINA,
    action,
    assign,
    running_console,
    running_scoring,
    scorer,
)
from tests.support.sessions import session_metadata, signed_in

FEED_TOKEN = "feed-token-that-only-the-feed-team-holds"
TIMELINE = command_pb2.GetTimelineRequest(subject=command_pb2.Subject(kind="event", code="AG2026"))


def _hash_token(token: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "omnium_grpc", "hash-token"],
        input=token + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


async def test_a_caller_listed_by_its_token_s_hash_is_let_in_with_the_token(
    database_url: str, db: asyncpg.Connection
) -> None:
    hashed = _hash_token(FEED_TOKEN)
    assert hashed.startswith("sha256=") and FEED_TOKEN not in hashed
    callers = (f"omnium-tests:service:{TOKEN}", f"stats-team:reader:{hashed}")
    async with running_command(database_url, grpc_callers=callers) as client:
        said = {}
        for token in (FEED_TOKEN, hashed, "not-a-token-anyone-holds"):
            channel = open_channel(f"127.0.0.1:{client.port}", client.settings, token=token)
            stub = command_pb2_grpc.CommandServiceStub(channel)
            try:
                await stub.GetTimeline(TIMELINE, timeout=10)
                said[token] = "OK"
            except grpc.aio.AioRpcError as exc:
                said[token] = exc.code().name
            await channel.close()
    # The token opens the door; the hash itself, copied from the settings, does not.
    assert said == {
        FEED_TOKEN: "OK",
        hashed: "UNAUTHENTICATED",
        "not-a-token-anyone-holds": "UNAUTHENTICATED",
    }


def test_hash_token_without_a_token_says_how_to_give_one() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "omnium_grpc", "hash-token"],
        input="",
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no token on standard input" in done.stderr


def _reachable(root: object) -> list[object]:
    seen: dict[int, object] = {}
    todo = [root]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen[id(item)] = item
        todo.extend(gc.get_referents(item))
    return list(seen.values())


def test_a_server_keeps_no_token_in_clear_even_when_the_settings_give_one() -> None:
    callers = Callers.parse([f"results-feed:provider:{FEED_TOKEN}"])
    held = [
        x
        for x in _reachable(callers)
        if isinstance(x, (str, bytes))
        and (FEED_TOKEN in x if isinstance(x, str) else FEED_TOKEN.encode() in x)
    ]
    assert held == []


def test_a_bad_hash_stops_start_up_in_plain_words() -> None:
    with pytest.raises(Exception) as raised:
        Callers.parse(["stats-team:reader:sha256=abc"])
    assert "is not 64 hex digits after sha256=" in str(raised.value)
    assert "python -m omnium_grpc hash-token" in str(raised.value)


def test_production_refuses_a_token_in_clear_and_takes_its_hash() -> None:
    hashed = _hash_token(FEED_TOKEN)

    def problems(item: str) -> list[str]:
        settings = Settings.from_env(
            {"OMNIUM_ENVIRONMENT": "production", "OMNIUM_GRPC_CALLERS": item}
        )
        return [p for p in deploy_problems(settings) if "OMNIUM_GRPC_CALLERS" in p]

    clear = problems(f"results-feed:provider:{FEED_TOKEN}")
    assert any("gives caller results-feed its token in clear" in p for p in clear), clear
    assert all(FEED_TOKEN not in p for p in clear)
    assert problems(f"results-feed:provider:{hashed}") == []


async def _outcome(call: object) -> tuple[str, str]:
    """The status code's name (OK when it answered) and the details or the answer's reason."""
    try:
        answer = await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code().name, exc.details() or ""
    reason = getattr(answer, "reason", "")
    outcome = getattr(answer, "outcome", None)
    if isinstance(answer, scoring_pb2.ActAnswer) and outcome == scoring_pb2.OUTCOME_REFUSED:
        return "REFUSED", reason
    return "OK", reason


async def _logged(db: asyncpg.Connection, command_id: str) -> tuple[str, ...] | None:
    row = await db.fetchrow(
        "SELECT actor_kind, actor_name, source_code FROM timeline_item WHERE command_id = $1",
        command_id,
    )
    return None if row is None else tuple(row)


async def test_the_scorer_console_acts_and_reads_only_as_its_signed_in_scorer(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    mine, theirs = games.units
    await assign(db, [mine])  # Mina Park's match; the other is nobody's yet
    mina = session_metadata(await signed_in(db, "Mina Park", "scorer", MINA))
    claimed = person("Aiko Tanaka", screen="scorer-console")  # an operator, says the call
    said: dict[str, tuple[str, str]] = {}
    async with running_scoring(database_url) as scoring:
        channel = open_channel(f"127.0.0.1:{scoring.port}", scoring.settings, token=GATEWAY_TOKEN)
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)

        def act(client_id: str, unit: str, actor: actor_pb2.Actor, metadata: object) -> object:
            request = scoring_pb2.ActRequest(
                action=action(unit, client_id, "start_period"), actor=actor
            )
            return stub.Act(request, timeout=30, metadata=metadata)

        def read(unit: str, metadata: object) -> object:
            request = scoring_pb2.GetMatchStateRequest(unit_id=unit)
            return stub.GetMatchState(request, timeout=10, metadata=metadata)

        said["a person named, no session"] = await _outcome(act("g:1", theirs, claimed, ()))
        said["a person named, Mina's session"] = await _outcome(act("g:2", theirs, claimed, mina))
        said["Mina's match, another name"] = await _outcome(
            act("g:3", mine, scorer("Somebody Else", "account:7"), mina)
        )
        said["read Mina's match"] = await _outcome(read(mine, mina))
        said["read another match"] = await _outcome(read(theirs, mina))
        said["read with no session"] = await _outcome(read(mine, ()))
        said["a session that ended"] = await _outcome(read(mine, session_metadata("gone")))
        await channel.close()
    assert {k: v[0] for k, v in said.items()} == {
        "a person named, no session": "PERMISSION_DENIED",
        "a person named, Mina's session": "REFUSED",
        "Mina's match, another name": "OK",
        "read Mina's match": "OK",
        "read another match": "PERMISSION_DENIED",
        "read with no session": "PERMISSION_DENIED",
        "a session that ended": "UNAUTHENTICATED",
    }
    assert "acts only for a signed-in person" in said["a person named, no session"][1]
    assert "not assigned to you" in said["a person named, Mina's session"][1]
    assert "this match is not assigned to you" in said["read another match"][1]
    assert "sign in first" in said["read with no session"][1]
    assert "sign in on the console again" in said["a session that ended"][1]
    # Nothing of the refused calls was written; the saved one names the signed-in scorer.
    assert await _logged(db, "g:1") is None
    assert await _logged(db, "g:2") is None
    assert await _logged(db, "g:3") == ("scorer", "Mina Park", f"account:{MINA}")


async def test_the_operators_console_changes_nothing_without_a_signed_in_person(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    run_id = await make_run(db, games)
    olga_id = "00000000-0000-4000-8000-0000000000a1"
    olga = session_metadata(await signed_in(db, "Olga Ivanova", "operator", olga_id))
    viewer = session_metadata(await signed_in(db, "Vic Viewer", "viewer"))
    robot = actor_pb2.Actor(
        kind=actor_pb2.Actor.KIND_INTEGRATION, name="integration:x", screen="admin:units"
    )
    said: dict[str, tuple[str, str]] = {}
    async with running_command(database_url) as client:
        channel = open_channel(f"127.0.0.1:{client.port}", client.settings, token=ADMIN_TOKEN)
        stub = command_pb2_grpc.CommandServiceStub(channel)

        def submit(command_id: str, code: str, actor: actor_pb2.Actor, metadata: object) -> object:
            payload = {} if code == "results.approve" else {"status": "RUNNING"}
            return stub.Submit(
                command(command_id, code, payload, unit_id=games.units[0], actor=actor),
                timeout=10,
                metadata=metadata,
            )

        said["approve, no session"] = await _outcome(submit("a:1", "results.approve", person(), ()))
        said["as an integration, no session"] = await _outcome(
            submit("a:2", "results.set_status", robot, ())
        )
        said["a viewer's session"] = await _outcome(
            submit("a:3", "results.set_status", person(), viewer)
        )
        said["Olga's session"] = await _outcome(
            submit("a:4", "results.approve", person("Aiko Tanaka"), olga)
        )
        await channel.close()
        imports = ImportsApp(import_settings(database_url, client.port))
        await imports.start(0, workers=0, scheduler=False, followups=False, grpc_port=0)
        try:
            channel = open_channel(
                f"127.0.0.1:{imports.grpc_port}", client.settings, token=ADMIN_TOKEN
            )
            runs = imports_pb2_grpc.ImportsServiceStub(channel)
            for name, metadata in (("start, no session", ()), ("start, Olga's session", olga)):
                said[name] = await _outcome(
                    runs.StartRun(
                        imports_pb2.StartRunRequest(
                            run_id=run_id, actor=person(screen="admin:runs")
                        ),
                        timeout=10,
                        metadata=metadata,
                    )
                )
            await channel.close()
        finally:
            await imports.stop(grace=1)
    assert {k: v[0] for k, v in said.items()} == {
        "approve, no session": "PERMISSION_DENIED",
        "as an integration, no session": "PERMISSION_DENIED",
        "a viewer's session": "PERMISSION_DENIED",
        "Olga's session": "OK",
        "start, no session": "PERMISSION_DENIED",
        "start, Olga's session": "OK",
    }
    assert "Vic Viewer is signed in as a viewer" in said["a viewer's session"][1]
    assert [await _logged(db, f"a:{n}") for n in (1, 2, 3)] == [None, None, None]
    # The approval names the person signed in, not the one the call named.
    assert await _logged(db, "a:4") == ("person", "Olga Ivanova", f"account:{olga_id}")


async def test_the_gateway_s_scorer_console_sends_its_scorer_s_session(
    database_url: str, db: asyncpg.Connection
) -> None:
    """Through the real console, with the gateway's own role: the signed-in scorer's matches
    only, to read and to score, and the log names them."""
    games = await make_games(db, units=2)
    mine, theirs = games.units
    async with running_console(database_url, gateway_token=GATEWAY_TOKEN) as site:
        await site.accounts.create("mina", "Mina Park", "scorer", "a long password")
        await site.assign("mina", [mine])
        async with httpx.AsyncClient(base_url=site.url, timeout=30) as http:
            signed = await http.post(
                "/score/api/sign-in", json={"login": "mina", "password": "a long password"}
            )
            headers = {"X-CSRF-Token": signed.json()["csrf"]}
            listed = (await http.get("/score/api/matches")).json()["matches"]
            own = await http.get(f"/score/api/matches/{mine}")
            other = await http.get(f"/score/api/matches/{theirs}")
            scored = await http.post(
                f"/score/api/matches/{mine}/actions",
                json={"client_id": "w:1", "kind": "start_period"},
                headers=headers,
            )
            refused = await http.post(
                f"/score/api/matches/{theirs}/actions",
                json={"client_id": "w:2", "kind": "start_period"},
                headers=headers,
            )
    assert [m["unit_id"] for m in listed] == [mine]
    assert own.status_code == 200
    assert other.status_code == 403
    assert "this match is not assigned to you" in other.json()["error"]
    assert scored.json()["outcome"] == "saved"
    assert refused.json()["outcome"] == "refused"
    account = await db.fetchval("SELECT id::text FROM account WHERE login = 'mina'")
    assert await _logged(db, "w:1") == ("scorer", "Mina Park", f"account:{account}")
    assert await _logged(db, "w:2") is None


def test_a_console_s_actor_is_its_signed_in_person_whatever_the_call_names() -> None:
    callers = Callers.parse(
        ["admin-console:operator-console:t-admin", "gateway:scorer-console:t-gateway"]
    )
    admin = callers.identify((("authorization", "Bearer t-admin"),))
    gateway = callers.identify((("authorization", "Bearer t-gateway"),))
    assert not isinstance(admin, str) and not isinstance(gateway, str)
    olga = Person("a1", "olga", "Olga", "operator")
    mina = Person("m1", "mina", "Mina Park", "scorer")
    posing = actor_pb2.Actor(
        kind=actor_pb2.Actor.KIND_PERSON, name="Aiko", source_code="account:7", screen="s"
    )

    def shown(actor: actor_pb2.Actor) -> tuple[int, str, str, str]:
        return (actor.kind, actor.name, actor.source_code, actor.screen)

    person, scorer_kind = actor_pb2.Actor.KIND_PERSON, actor_pb2.Actor.KIND_SCORER
    assert shown(admin.for_person(olga).acting(posing)) == (person, "Olga", "account:a1", "s")
    # A scorer account always acts as a scorer, so assignment applies to it.
    assert shown(gateway.for_person(mina).acting(posing)) == (
        scorer_kind,
        "Mina Park",
        "account:m1",
        "s",
    )
    assert shown(gateway.acting(posing)) == (scorer_kind, "scorer (not signed in)", "", "s")
