"""The scorer console's watch stream is capped per signed-in session and per client address.

Each watch holds a connection and a scoring stream, so one session (or one address, behind the
trusted proxies) may hold only so many on a gateway worker; past it, 429 with Retry-After and a
reason. Real streams against the real gateway in front of a real scoring service.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import asyncpg
import httpx
import pytest

from omnium_settings import Settings, SettingsError
from tests.support.games import make_games
from tests.support.scoring import ConsoleSite, running_console
from tests.support.waiting import eventually

PASSWORD = "a long password"


async def _signed_in(clients: AsyncExitStack, site: ConsoleSite, login: str) -> httpx.AsyncClient:
    """A browser of its own (its own cookie), signed in as `login`, closed with `clients`."""
    http = await clients.enter_async_context(httpx.AsyncClient(base_url=site.url, timeout=30))
    answer = await http.post("/score/api/sign-in", json={"login": login, "password": PASSWORD})
    assert answer.status_code == 200, answer.text
    return http


async def _watch(
    stack: AsyncExitStack, http: httpx.AsyncClient, unit: str, address: str | None = None
) -> httpx.Response:
    """A watch stream held open until `stack` closes; admitted ones have sent their first state."""
    headers = {"X-Forwarded-For": address} if address else {}
    response = await stack.enter_async_context(
        http.stream("GET", f"/score/api/matches/{unit}/watch", headers=headers)
    )
    if response.status_code == 200:
        await anext(line async for line in response.aiter_lines() if line.startswith("data:"))
    else:
        await response.aread()
    return response


async def _scorers(site: ConsoleSite, units: list[str], *logins: str) -> None:
    for login in logins:
        await site.accounts.create(login, login.title(), "scorer", PASSWORD)
        await site.assign(login, units)


def _assert_refused(answer: httpx.Response, *, setting: str) -> None:
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "7"
    reason = answer.json()["error"]
    assert setting in reason and "try again after Retry-After seconds" in reason


async def test_one_session_holds_at_most_its_watch_streams(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=2)
    async with running_console(
        database_url,
        scorer_watch_per_session=2,
        scorer_watch_per_address=100,
        scorer_watch_retry_after_seconds=7,
    ) as site:
        await _scorers(site, games.units, "mina", "olga")
        async with AsyncExitStack() as clients, AsyncExitStack() as held:
            mina = await _signed_in(clients, site, "mina")
            olga = await _signed_in(clients, site, "olga")
            first = await _watch(held, mina, games.units[0])
            second = await _watch(held, mina, games.units[1])
            assert (first.status_code, second.status_code) == (200, 200)
            async with AsyncExitStack() as extra:
                third = await _watch(extra, mina, games.units[0])
            _assert_refused(third, setting="OMNIUM_SCORER_WATCH_PER_SESSION")
            # Another scorer at the same address is not held back by mina's streams.
            async with AsyncExitStack() as hers:
                assert (await _watch(hers, olga, games.units[0])).status_code == 200
            # Closing one of mina's streams frees its place (once the server sees it gone).
            await held.aclose()

            async def admitted() -> bool:
                async with AsyncExitStack() as again:
                    return (await _watch(again, mina, games.units[0])).status_code == 200

            await eventually(admitted, what="a watch after mina closed hers")


async def test_one_address_holds_at_most_its_watch_streams_whatever_the_session(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_console(
        database_url,
        trusted_proxies=("127.0.0.0/8",),  # the venue's Wi-Fi in front of the gateway
        scorer_watch_per_session=100,
        scorer_watch_per_address=2,
        scorer_watch_retry_after_seconds=7,
    ) as site:
        await _scorers(site, games.units, "mina", "olga", "ravi")
        async with AsyncExitStack() as clients, AsyncExitStack() as held:
            mina = await _signed_in(clients, site, "mina")
            olga = await _signed_in(clients, site, "olga")
            ravi = await _signed_in(clients, site, "ravi")
            assert (await _watch(held, mina, unit, "203.0.113.5")).status_code == 200
            assert (await _watch(held, olga, unit, "203.0.113.5")).status_code == 200
            # A new session from the same address does not get round the address's cap.
            async with AsyncExitStack() as extra:
                third = await _watch(extra, ravi, unit, "203.0.113.5")
            _assert_refused(third, setting="OMNIUM_SCORER_WATCH_PER_ADDRESS")
            # The cap is the fan's real address behind the proxies, not the proxy's.
            async with AsyncExitStack() as elsewhere:
                assert (await _watch(elsewhere, ravi, unit, "198.51.100.9")).status_code == 200


@pytest.mark.parametrize(
    "override",
    [
        {"scorer_watch_per_session": -1},
        {"scorer_watch_per_address": -4},
        {"scorer_watch_retry_after_seconds": 0},
    ],
)
def test_a_cap_that_cannot_work_is_refused_at_start(override: dict[str, int]) -> None:
    with pytest.raises(SettingsError, match="OMNIUM_SCORER_WATCH_PER_SESSION"):
        Settings.from_env({}, **override)
