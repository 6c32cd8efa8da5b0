"""Start a real scoring service (and the real command service it writes through)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from aiohttp import web
from google.protobuf import json_format, struct_pb2
from grpc import aio

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_accounts import Accounts
from omnium_db import PoolRoad, create_pool
from omnium_gateway import ScorerRoutes, make_app
from omnium_grpc import actor_message, open_channel
from omnium_scoring import ScoringApp
from omnium_settings import Settings
from tests.support.command import CommandClient, running_command, settings_for
from tests.support.games import EVENT, Games, unit_code
from tests.support.venue import VenueWifi, venue_wifi

PROVIDERS = Path(__file__).resolve().parent.parent / "data" / "providers"


@dataclass(slots=True)
class ScoringClient:
    app: ScoringApp
    port: int
    channel: aio.Channel
    stub: scoring_pb2_grpc.ScoringServiceStub
    command: CommandClient
    settings: Settings

    async def act(
        self,
        unit_id: str,
        client_id: str,
        action_kind: str,
        side: int = 0,
        actor: actor_pb2.Actor | None = None,
        undo_seq: int = 0,
        **fields: Any,
    ) -> scoring_pb2.ActAnswer:
        answer: scoring_pb2.ActAnswer = await self.stub.Act(
            scoring_pb2.ActRequest(
                action=action(unit_id, client_id, action_kind, side, undo_seq=undo_seq, **fields),
                actor=actor or scorer(),
            ),
            timeout=30,
        )
        return answer

    async def state(self, unit_id: str, recent: int = 0) -> scoring_pb2.MatchState:
        state: scoring_pb2.MatchState = await self.stub.GetMatchState(
            scoring_pb2.GetMatchStateRequest(unit_id=unit_id, recent=recent), timeout=10
        )
        return state


def action(
    unit_id: str,
    client_id: str,
    action_kind: str,
    side: int = 0,
    *,
    undo_seq: int = 0,
    **fields: Any,
) -> scoring_pb2.Action:
    struct = struct_pb2.Struct()
    json_format.ParseDict(fields, struct)
    return scoring_pb2.Action(
        client_id=client_id, unit_id=unit_id, kind=action_kind, side=side, fields=struct,
        undo_seq=undo_seq,
    )  # fmt: skip


# The account behind the scorer the tests act as unless they say otherwise.
MINA = "00000000-0000-4000-8000-000000000011"


def scorer(
    name: str = "Mina Park", account: str = f"account:{MINA}", screen: str = "scorer-console"
) -> actor_pb2.Actor:
    return actor_message("scorer", name, source_code=account, screen=screen)


async def assign(
    conn: asyncpg.Connection, units: Iterable[str], *who: actor_pb2.Actor | str
) -> None:
    """These units to these scorers (Mina Park when none is named), as an operator assigns
    matches before they start. A scorer is an actor (its account is made when missing, role
    scorer) or the login of an account that exists."""
    ids = []
    for one in who or (scorer(),):
        if isinstance(one, str):
            ids.append(await conn.fetchval("SELECT id::text FROM account WHERE login = $1", one))
            continue
        account_id = one.source_code.removeprefix("account:")
        await conn.execute(
            "INSERT INTO account (id, login, name, role, password_hash) "
            "VALUES ($1, $2, $3, 'scorer', 'not a hash: no sign-in') ON CONFLICT (id) DO NOTHING",
            account_id,
            f"scorer-{account_id[-6:]}",
            one.name,
        )
        ids.append(account_id)
    await conn.executemany(
        "INSERT INTO scorer_assignment (account_id, event_id, unit_id, assigned_by) "
        "SELECT $1::uuid, u.event_id, u.id, 'a test' FROM unit u WHERE u.id = $2::uuid",
        [(account_id, unit) for account_id in ids for unit in units],
    )


@asynccontextmanager
async def running_scoring(database_url: str, **overrides: Any) -> AsyncIterator[ScoringClient]:
    overrides.setdefault("scoring_providers_dir", str(PROVIDERS))
    # One deployment's processes share their TLS settings and a person's time limit: the
    # command service gets them too.
    shared = {
        k: v
        for k, v in overrides.items()
        if k.startswith("grpc_tls_") or k == "people_transaction_seconds"
    }
    async with running_command(database_url, **shared) as command:
        settings = settings_for(
            database_url, command_address=f"127.0.0.1:{command.port}", **overrides
        )
        app = ScoringApp(settings)
        try:
            port = await app.start(0)
            channel = open_channel(f"127.0.0.1:{port}", settings)
            try:
                yield ScoringClient(
                    app,
                    port,
                    channel,
                    scoring_pb2_grpc.ScoringServiceStub(channel),
                    command,
                    settings,
                )
            finally:
                await channel.close()
        finally:
            await app.stop(grace=1)


async def add_match(
    conn: asyncpg.Connection, games: Games, discipline: str, sides: int = 2, n: int = 1
) -> str:
    """A unit of a discipline (made if missing) with `sides` sides, from the Games' teams."""
    discipline_id = games.disciplines.get(discipline)
    if discipline_id is None:
        discipline_id = await conn.fetchval(
            "INSERT INTO discipline (event_id, code, name) VALUES ($1, $2, $2) RETURNING id::text",
            games.event_id,
            discipline,
        )
        games.disciplines[discipline] = discipline_id
    code = unit_code(discipline, n)
    unit_id: str = await conn.fetchval(
        "INSERT INTO unit (event_id, discipline_id, code, name) VALUES ($1, $2, $3, $4) "
        "RETURNING id::text",
        games.event_id,
        discipline_id,
        code,
        f"{discipline} match {n}",
    )
    teams = list(games.competitors.values())
    for order in range(1, sides + 1):
        await conn.execute(
            "INSERT INTO unit_competitor (unit_id, sort_order, competitor_id) VALUES ($1, $2, $3)",
            unit_id,
            order,
            teams[(order - 1) % len(teams)] if order <= len(teams) else None,
        )
    games.units.append(unit_id)
    games.unit_codes[unit_id] = code
    return unit_id


__all__ = [
    "EVENT",
    "MINA",
    "ScoringClient",
    "action",
    "add_match",
    "assign",
    "running_scoring",
    "scorer",
]


@dataclass(slots=True)
class ConsoleSite:
    """The real gateway serving the scorer console, in front of a real scoring service."""

    url: str
    scoring: ScoringClient
    accounts: Any
    wifi: VenueWifi  # the browser reaches `url` through it: `wifi.cut()` takes the network away
    pool: asyncpg.Pool

    async def assign(self, login: str, units: Iterable[str]) -> None:
        """These units to the account with this login, as an operator does."""
        async with self.pool.acquire() as conn:
            await assign(conn, units, login)


@asynccontextmanager
async def running_console(
    database_url: str,
    redis_url: str | None = None,
    *,
    gateway_token: str | None = None,
    **overrides: Any,
) -> AsyncIterator[ConsoleSite]:
    """The gateway with its scorer routes (as `python -m omnium_gateway` mounts them).

    Without `redis_url` the gateway runs as it does when Redis is down: the console does not
    need Redis. `accounts` is the test's own handle for making scorer accounts.
    `gateway_token`: the gateway calls scoring as that caller (the tests' service caller when
    unset), e.g. the scorer console's own role.
    """
    async with running_scoring(database_url, **overrides) as scoring:
        settings = scoring.settings.replace(
            scoring_address=f"127.0.0.1:{scoring.port}", redis_url=redis_url
        )
        if gateway_token is not None:
            settings = settings.replace(grpc_token=gateway_token)
        pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="test", size=2)
        app = make_app(settings, route_sets=[ScorerRoutes(settings)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with venue_wifi("127.0.0.1", port) as wifi:
                yield ConsoleSite(
                    f"http://127.0.0.1:{wifi.port}", scoring, Accounts(pool, settings), wifi, pool
                )
        finally:
            await runner.cleanup()
            await pool.close()
