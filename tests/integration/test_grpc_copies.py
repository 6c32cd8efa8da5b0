"""Two command copies behind one address: calls spread over both, survive one, write once."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import asyncpg
import grpc
import pytest
from grpc import aio

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_command import CommandApp
from omnium_command import _app as command_app
from omnium_command._service import CommandService
from omnium_grpc import open_channel
from omnium_settings import Settings
from tests.support.command import command, settings_for
from tests.support.games import make_games
from tests.support.waiting import eventually

OUT = command_pb2


class CountedCommandService(CommandService):
    """The real servicer, counting the calls this copy answered."""

    started: ClassVar[list[CountedCommandService]] = []

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.submits = 0
        CountedCommandService.started.append(self)

    async def Submit(self, request: command_pb2.Command, context: Any) -> command_pb2.Answer:
        self.submits += 1
        return await super().Submit(request, context)


@dataclass(slots=True)
class Copies:
    apps: list[CommandApp]
    services: list[CountedCommandService]
    stub: command_pb2_grpc.CommandServiceStub
    settings: Settings

    async def submit(self, command_id: str, unit_id: str) -> command_pb2.Answer:
        answer: command_pb2.Answer = await self.stub.Submit(
            command(command_id, "results.set_status", {"status": "RUNNING"}, unit_id=unit_id),
            timeout=self.settings.grpc.deadline_seconds,
        )
        return answer


@asynccontextmanager
async def two_copies(
    database_url: str, monkeypatch: pytest.MonkeyPatch, **overrides: Any
) -> AsyncIterator[Copies]:
    monkeypatch.setattr(command_app, "CommandService", CountedCommandService)
    monkeypatch.setattr(CountedCommandService, "started", [])
    settings = settings_for(database_url, **overrides)
    apps = [CommandApp(settings), CommandApp(settings)]
    ports = [await app.start(0) for app in apps]
    channel = open_channel(",".join(f"127.0.0.1:{port}" for port in ports), settings)
    try:
        yield Copies(
            apps,
            list(CountedCommandService.started),
            command_pb2_grpc.CommandServiceStub(channel),
            settings,
        )
    finally:
        await channel.close()
        for app in apps:
            await app.stop(grace=0)


async def _both_connected(copies: Copies, unit_id: str) -> None:
    # round_robin sends to the copies it is connected to; the second connects a moment later.
    sent = itertools.count(1)

    async def both_called() -> bool:
        if all(service.submits for service in copies.services):
            return True
        await copies.submit(f"warm-{next(sent)}", unit_id)
        return False

    await eventually(both_called, within=10, every=0.01, what="a call to each copy")


async def _writes(db: asyncpg.Connection, command_id: str) -> int:
    count: int = await db.fetchval(
        "SELECT count(*) FROM timeline_item WHERE command_id = $1", command_id
    )
    return count


async def test_one_address_naming_two_copies_spreads_calls_over_both(
    database_url: str, db: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    games = await make_games(db, units=21)
    async with two_copies(database_url, monkeypatch) as copies:
        await _both_connected(copies, games.units[20])
        before = [service.submits for service in copies.services]
        answers = [await copies.submit(f"spread-{i}", games.units[i]) for i in range(20)]
        after = [service.submits for service in copies.services]
    assert [answer.outcome for answer in answers] == [OUT.OUTCOME_ACCEPTED] * 20
    per_copy = [b - a for a, b in zip(before, after, strict=True)]
    assert sum(per_copy) == 20
    # round_robin alternates; one copy taking them all is how a single-address channel behaves.
    assert min(per_copy) >= 8, per_copy


# Abrupt, and the graceful stop of a release: both cancel the calls the copy had received but
# not yet started, which the caller must not see.
@pytest.mark.parametrize("grace", [0.0, 2.0], ids=["abrupt", "graceful"])
async def test_a_copy_stopped_mid_flight_loses_nothing_and_writes_nothing_twice(
    database_url: str, db: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch, grace: float
) -> None:
    games = await make_games(db, units=61)
    async with two_copies(database_url, monkeypatch) as copies:
        await _both_connected(copies, games.units[60])
        stopped, other = copies.services
        ids = [f"through-stop-{i}" for i in range(60)]
        pairs = list(zip(ids, games.units[:60], strict=True))
        calls = [asyncio.create_task(copies.submit(command_id, unit)) for command_id, unit in pairs]
        # Stop one copy while the calls are on the wire.
        await asyncio.sleep(0.05)
        stopped_had = stopped.submits
        await copies.apps[0].stop(grace=grace)
        first = await asyncio.gather(*calls, return_exceptions=True)
        answered_by_other = other.submits
        again = [await copies.submit(command_id, unit) for command_id, unit in pairs]
    errors = [answer for answer in first if isinstance(answer, BaseException)]
    assert errors == [], errors
    # A call the stopped copy saved but could not answer is sent to the other: it says
    # duplicate, the answer for an action already saved.
    outcomes = {answer.outcome for answer in first if isinstance(answer, command_pb2.Answer)}
    assert outcomes <= {OUT.OUTCOME_ACCEPTED, OUT.OUTCOME_DUPLICATE}
    assert stopped_had > 0, "the stopped copy took no calls before it stopped"
    assert answered_by_other > 0
    assert [answer.outcome for answer in again] == [OUT.OUTCOME_DUPLICATE] * 60
    assert [await _writes(db, command_id) for command_id in ids] == [1] * 60


async def test_with_every_copy_gone_the_deadline_bounds_all_tries(
    database_url: str, db: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    games = await make_games(db, units=2)
    # Tries that would take 4 × 5 s are cut by the call's one deadline of 1 s.
    async with two_copies(
        database_url,
        monkeypatch,
        grpc_retry_attempts=5,
        grpc_retry_first_backoff_seconds=5.0,
        grpc_retry_max_backoff_seconds=5.0,
        grpc_deadline_seconds=1.0,
    ) as copies:
        await _both_connected(copies, games.units[0])
        for app in copies.apps:
            await app.stop(grace=0)
        started = time.monotonic()
        with pytest.raises(aio.AioRpcError) as raised:
            await copies.submit("nobody-home", games.units[1])
        took = time.monotonic() - started
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert took < 2.0, took
    assert await _writes(db, "nobody-home") == 0
