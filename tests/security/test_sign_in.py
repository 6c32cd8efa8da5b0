"""Sign-in on the scorer console (the gateway) and the admin console, as a guesser, a flood and a
stranger see it: throttles before any hash, a bounded pool of password checks, one answer for
every mistake, and an audit trail. Real PostgreSQL, Redis and both consoles' HTTP servers; the
client address comes from X-Forwarded-For, which the consoles believe from 127.0.0.0/8 only."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiohttp import web

from omnium_accounts import Accounts, password_checks
from omnium_admin import AdminApp
from omnium_db import PoolRoad, create_pool
from omnium_gateway import ScorerRoutes, make_app
from omnium_settings import Settings
from tests.support.servers import Servers

PASSWORD = "correct horse battery"
WRONG = {"error": "the login or the password is wrong"}
SIGN_IN = "/score/api/sign-in"


@dataclass(slots=True)
class Doors:
    """Both consoles on one database: the gateway's scorer console and the admin console."""

    scorer_url: str
    admin_url: str
    accounts: Accounts
    settings: Settings

    def scorer(self, address: str | None = None) -> httpx.AsyncClient:
        """A browser at `address` (as the balancer in front says), on the scorer console."""
        headers = {"X-Forwarded-For": address} if address else {}
        return httpx.AsyncClient(base_url=self.scorer_url, headers=headers, timeout=30)

    def admin(self, address: str | None = None) -> httpx.AsyncClient:
        headers = {"X-Forwarded-For": address} if address else {}
        return httpx.AsyncClient(
            base_url=self.admin_url, headers=headers, timeout=30, follow_redirects=False
        )


@asynccontextmanager
async def consoles(
    database_url: str, redis_url: str | None = None, **overrides: Any
) -> AsyncIterator[Doors]:
    """The scorer console as `python -m omnium_gateway` mounts it, and the admin console. No
    scoring or imports service runs: sign-in and its doors need only the database (and Redis
    when given)."""
    overrides.setdefault("trusted_proxies", ("127.0.0.0/8",))
    # Served over plain HTTP here: production would make the cookies Secure.
    overrides.setdefault("environment", "development")
    overrides.setdefault("gateway_redis_prefix", f"test:{uuid.uuid4().hex[:10]}:")
    settings = Settings.from_env(
        {},
        database_url=database_url,
        redis_url=redis_url,
        scoring_address="127.0.0.1:9",
        **overrides,
    )
    pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="test", size=2)
    runner = web.AppRunner(make_app(settings, route_sets=[ScorerRoutes(settings)]))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    admin = AdminApp(settings)
    try:
        admin_port = await admin.start(0)
        yield Doors(
            f"http://127.0.0.1:{runner.addresses[0][1]}",
            f"http://127.0.0.1:{admin_port}",
            Accounts(pool, settings),
            settings,
        )
    finally:
        await admin.stop(grace=0)
        await runner.cleanup()
        await pool.close()


async def scorer_sign_in(
    http: httpx.AsyncClient, login: str, password: str = PASSWORD
) -> httpx.Response:
    return await http.post(SIGN_IN, json={"login": login, "password": password})


async def admin_sign_in(
    http: httpx.AsyncClient, login: str, password: str = PASSWORD, next_path: str = "/"
) -> httpx.Response:
    """The admin console's form, as a browser fills it: its page first (the sign-in cookie)."""
    form = await http.get("/sign-in")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert token is not None, form.text
    return await http.post(
        "/sign-in",
        data={"csrf_token": token[1], "login": login, "password": password, "next": next_path},
    )


@pytest.fixture(params=["redis", "postgresql"])
async def doors(
    request: pytest.FixtureRequest, database_url: str, servers: Servers
) -> AsyncIterator[Doors]:
    """Both consoles; the scorer console counts in Redis, or (no Redis) in PostgreSQL."""
    redis_url = servers.redis_url if request.param == "redis" else None
    async with consoles(database_url, redis_url) as doors:
        await doors.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        yield doors


async def test_a_guesser_is_slowed_per_address_and_login_and_the_answer_names_no_login(
    doors: Doors,
) -> None:
    async with doors.scorer("203.0.113.1") as guesser, doors.scorer("198.51.100.9") as venue:
        for login in ("mina", "nobody"):
            for _ in range(5):  # sign_in_free_failures
                wrong = await scorer_sign_in(guesser, login, "guess")
                assert (wrong.status_code, wrong.json()) == (401, WRONG)
        mina = await scorer_sign_in(guesser, "mina", "guess")
        nobody = await scorer_sign_in(guesser, "nobody", "guess")
        # Even the right password now waits, from this address, on this login.
        right = await scorer_sign_in(guesser, "mina")
        # Mina herself, at the venue, is not slowed down by the stranger.
        at_venue = await scorer_sign_in(venue, "mina")
    for refused in (mina, nobody, right):
        assert refused.status_code == 429
        assert 60 < int(refused.headers["Retry-After"]) <= 300
    # The same words whether the login exists or not (the wait left is the guesser's own:
    # from its first failure on that login).
    wait = r"\d+ min( \d+ s)?|\d+ s"
    words = {re.sub(wait, "N", a.json()["error"]) for a in (mina, nobody, right)}
    assert words == {"too many failed sign-ins: try again in N"}
    assert at_venue.status_code == 200 and at_venue.json()["login"] == "mina"


async def test_with_redis_down_the_scorer_console_counts_in_postgresql(
    database_url: str, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    # A Redis that refuses connections: the port of one that has stopped.
    async with consoles(database_url, "redis://127.0.0.1:1/0") as doors:
        await doors.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        async with doors.scorer("203.0.113.30") as guesser:
            wrong = [(await scorer_sign_in(guesser, "mina", "guess")).status_code for _ in "12345"]
            refused = await scorer_sign_in(guesser, "mina")
    assert wrong == [401] * 5 and refused.status_code == 429
    assert "counting in PostgreSQL" in caplog.text


async def test_a_refused_attempt_costs_no_password_check(doors: Doors) -> None:
    checks = password_checks(doors.settings)
    async with doors.scorer("203.0.113.2") as guesser:
        for _ in range(5):
            assert (await scorer_sign_in(guesser, "mina", "guess")).status_code == 401
        before = checks.done
        answers = [await scorer_sign_in(guesser, "mina", "guess") for _ in range(20)]
    assert {a.status_code for a in answers} == {429}
    assert checks.done == before


async def test_parallel_guesses_get_no_more_tries_than_the_limit(doors: Doors) -> None:
    async with doors.scorer("203.0.113.3") as guesser:
        answers = await asyncio.gather(
            *(scorer_sign_in(guesser, "mina", f"guess {n}") for n in range(20))
        )
    statuses = [a.status_code for a in answers]
    # Five reach a password check; the rest are throttled, or answered busy before any count
    # when every password check is taken (a flood costs nothing past the pool's size).
    assert statuses.count(401) == 5
    assert set(statuses) - {401} <= {429, 503} and statuses.count(429) >= 1


async def test_many_addresses_cannot_hold_a_scorer_s_login_for_long(
    database_url: str, servers: Servers
) -> None:
    async with consoles(
        database_url, servers.redis_url, sign_in_login_failures=20, sign_in_login_window_seconds=60
    ) as doors:
        await doors.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        # Three strangers guess as fast as they may (15 failures, under the ceiling of 20).
        for n in range(3):
            async with doors.scorer(f"203.0.113.{10 + n}") as stranger:
                for _ in range(6):
                    await scorer_sign_in(stranger, "mina", "guess")
        async with doors.scorer("198.51.100.9") as venue:
            assert (await scorer_sign_in(venue, "mina")).status_code == 200
        # Past the ceiling the login waits, from everywhere, at most its window (60 s here).
        for n in range(2):
            async with doors.scorer(f"203.0.113.{20 + n}") as stranger:
                for _ in range(5):
                    await scorer_sign_in(stranger, "mina", "guess")
        async with doors.scorer("198.51.100.9") as venue:
            held = await scorer_sign_in(venue, "mina")
    assert held.status_code == 429 and 0 < int(held.headers["Retry-After"]) <= 60


async def test_unknown_turned_off_and_other_console_accounts_answer_as_a_wrong_password(
    doors: Doors,
) -> None:
    await doors.accounts.create("gone", "Gone Away", "scorer", PASSWORD)
    await doors.accounts.set_disabled("gone", True)
    await doors.accounts.create("ada", "Ada Admin", "admin", PASSWORD)
    await doors.accounts.create("vic", "Vic Viewer", "viewer", PASSWORD)
    checks = password_checks(doors.settings)
    cases = [("nobody", PASSWORD), ("mina", "guess"), ("gone", PASSWORD)]
    cases += [("ada", PASSWORD), ("vic", PASSWORD)]
    answers = []
    async with doors.scorer() as http:
        for login, password in cases:
            before = checks.done
            answer = await scorer_sign_in(http, login, password)
            # Each costs one password check, like a wrong password: the time says nothing.
            answers.append((login, answer.status_code, answer.json(), checks.done - before))
    assert answers == [(login, 401, WRONG, 1) for login, _ in cases]


async def test_past_the_pool_of_password_checks_sign_in_answers_503_at_once(
    database_url: str,
) -> None:
    async with consoles(database_url, sign_in_hash_threads=1, sign_in_hash_queue=0) as doors:
        await doors.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        checks = password_checks(doors.settings)
        assert (checks.threads, checks.capacity) == (1, 1)
        # Another sign-in's check holds the one thread.
        release = threading.Event()
        held = asyncio.create_task(checks.run(release.wait))
        await asyncio.sleep(0)  # the task takes its place before its first await
        assert checks.taken == 1
        try:
            async with doors.scorer("203.0.113.4") as http, doors.admin("203.0.113.4") as admin:
                busy = await scorer_sign_in(http, "mina")
                admin_busy = await admin_sign_in(admin, "mina", "guess")
        finally:
            release.set()
            await held
        async with doors.scorer("203.0.113.4") as http:
            # A busy answer is not a failure: the five free ones are all still there.
            wrong = [await scorer_sign_in(http, "mina", "guess") for _ in range(5)]
    assert busy.status_code == 503 and busy.headers["Retry-After"] == "2"
    assert "too many people are signing in" in busy.json()["error"]
    assert admin_busy.status_code == 503 and admin_busy.headers["Retry-After"] == "2"
    assert [w.status_code for w in wrong] == [401] * 5


async def test_the_admin_console_throttles_per_address_in_postgresql(doors: Doors) -> None:
    await doors.accounts.create("ana", "Ana Operator", "operator", PASSWORD)
    async with doors.admin("203.0.113.5") as guesser, doors.admin("198.51.100.7") as office:
        wrong = [(await admin_sign_in(guesser, "ana", "guess")).status_code for _ in range(5)]
        refused = await admin_sign_in(guesser, "ana")
        signed = await admin_sign_in(office, "ana")
    assert wrong == [401] * 5
    assert refused.status_code == 429 and 60 < int(refused.headers["Retry-After"]) <= 300
    assert "Too many failed sign-ins: try again in" in refused.text
    assert signed.status_code == 303


async def test_sign_ins_and_changes_are_audited_without_secrets(
    doors: Doors, caplog: pytest.LogCaptureFixture
) -> None:
    await doors.accounts.create("ada", "Ada Admin", "admin", PASSWORD)
    caplog.set_level(logging.INFO, logger="omnium.audit")
    async with doors.scorer("203.0.113.6") as phone:
        await scorer_sign_in(phone, "mina", "a wrong password")
        signed = await scorer_sign_in(phone, "mina")
        for _ in range(6):
            await scorer_sign_in(phone, "nobody", "a wrong password")
    async with doors.admin("198.51.100.8") as admin:
        assert (await admin_sign_in(admin, "ada")).status_code == 303
        keys = await admin.get("/keys")
        token = re.search(r'name="csrf_token" value="([^"]+)"', keys.text)
        assert token is not None
        made = await admin.post("/keys", data={"csrf_token": token[1], "name": "dailyhunt"})
        key = re.search(r"<code data-key>([^<]+)</code>", made.text)
        assert key is not None
        await admin.post("/keys/dailyhunt/off", data={"csrf_token": token[1]})
        await admin.post("/accounts/mina/role", data={"csrf_token": token[1], "role": "operator"})
    lines = [r.getMessage() for r in caplog.records if r.name == "omnium.audit"]
    events = [json.loads(line) for line in lines]
    sign_ins = [
        (e["login"], e["console"], e["address"], e["outcome"])
        for e in events
        if e["event"] == "sign_in"
    ]
    assert sign_ins == [
        ("mina", "scorer-console", "203.0.113.6", "refused"),
        ("mina", "scorer-console", "203.0.113.6", "signed_in"),
        *[("nobody", "scorer-console", "203.0.113.6", "refused")] * 5,
        ("nobody", "scorer-console", "203.0.113.6", "throttled"),
        ("ada", "admin", "198.51.100.8", "signed_in"),
    ]
    changes = [
        (e["event"], e.get("key_name") or e.get("login"), e["change"], e["by"])
        for e in events
        if e["event"] != "sign_in"
    ]
    assert changes[-3:] == [
        ("api_key_change", "dailyhunt", "made", "Ada Admin"),
        ("api_key_change", "dailyhunt", "turned off", "Ada Admin"),
        ("account_change", "mina", "role operator", "Ada Admin"),
    ]
    secret = [PASSWORD, "a wrong password", key[1], signed.json()["csrf"]]
    secret.append(signed.cookies["omnium_session"])
    assert [s for s in secret if any(s in line for line in lines)] == []


async def test_password_checks_run_only_on_cpu_time_nothing_else_wants() -> None:
    """Linux's SCHED_IDLE on each check's thread (the event loop's thread keeps its policy):
    a flood of sign-ins waits for the CPU; a scorer's tap does not wait for a hash."""
    checks = password_checks(Settings.from_env({}, sign_in_hash_threads=1, sign_in_hash_queue=0))
    policy = await checks.run(lambda: os.sched_getscheduler(0))
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
