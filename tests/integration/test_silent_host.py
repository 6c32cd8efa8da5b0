"""A first host that takes connections and never answers (a machine gone, its packets dropped)
costs every connection its per-host timeout, and the next host, the primary, is reached: the
LISTEN connections and the gateway relay's reader as well as the pools."""

from __future__ import annotations

import asyncpg

from omnium.command.v1 import command_pb2
from omnium_db import NotifyListener
from tests.support.command import running_command, settings_for
from tests.support.games import EVENT, make_games
from tests.support.gateway import running_gateway
from tests.support.outage import silent_host
from tests.support.servers import Servers
from tests.support.waiting import eventually

CHANNEL = "omnium_test_channel"
# Far below asyncpg's default connect timeout (60 s) and the test's own timeout: a connection
# that waited on the silent host for longer than this would never get to the second one.
HOST_TIMEOUT = 1.0
WITHIN = 20.0


async def test_the_listener_connects_and_listens_again_past_a_silent_first_host(
    database_url: str, db: asyncpg.Connection
) -> None:
    heard: list[str] = []
    caught_up: list[None] = []
    async with silent_host() as silent:
        listener = NotifyListener(
            settings_for(
                silent.in_front_of(database_url), database_connect_timeout_seconds=HOST_TIMEOUT
            ),
            {CHANNEL: heard.append},
            name="past-silent",
            on_reconnect=lambda: caught_up.append(None),
        )
        await listener.start()
        try:
            assert silent.accepted == 1
            await db.execute("SELECT pg_notify($1, 'first')", CHANNEL)
            await eventually(lambda: _true(heard == ["first"]), within=WITHIN, what="a NOTIFY")

            # The connection cut: each try to connect again passes the silent host first.
            cut = await db.fetchval(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'past-silent:listen'"
            )
            assert cut
            await eventually(
                lambda: _true(listener.reconnects == 1), within=WITHIN, what="a reconnect"
            )
            assert silent.accepted >= 2
            assert caught_up == [None]
            await db.execute("SELECT pg_notify($1, 'again')", CHANNEL)
            await eventually(
                lambda: _true(heard == ["first", "again"]), within=WITHIN, what="the next NOTIFY"
            )
        finally:
            await listener.close()


async def test_the_gateway_relay_reads_the_outbox_past_a_silent_first_host(
    database_url: str, db: asyncpg.Connection, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    path = f"/v1/events/{EVENT}/units/{games.unit_codes[unit]}"
    async with (
        silent_host() as silent,
        running_command(database_url) as command,
        running_gateway(
            silent.in_front_of(database_url),
            servers.redis_url,
            database_connect_timeout_seconds=HOST_TIMEOUT,
        ) as gw,
    ):
        answer = await command.submit(
            command_id="final-1",
            code="units.set_fields",
            unit_id=unit,
            payload={"fields": {"status": "OFFICIAL"}, "sides": [{"order": 1, "score": "2"}]},
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason

        async def shows(score: str) -> bool:
            answer = await gw.get(path)
            return answer.status_code == 200 and answer.json()["sides"][0]["score"] == score

        await eventually(lambda: shows("2"), within=WITHIN, what="the first score")
        answer = await command.submit(
            command_id="final-2",
            code="results.set_sides",
            unit_id=unit,
            payload={"sides": [{"order": 1, "score": "3"}]},
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
        # A final result is cached for hours: only the relay's invalidation shows the new
        # score, and the relay reads the outbox on connections of its own.
        await eventually(lambda: shows("3"), within=WITHIN, what="the new score")
        assert silent.accepted >= 2


async def _true(value: bool) -> bool:
    return value
