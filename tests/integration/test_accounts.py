"""Accounts: slow hashes, sign-in that slows down after failures, sessions, the CLI."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from omnium_accounts import (
    AccountError,
    Accounts,
    SignInRefused,
    SignInThrottled,
    hash_password,
    verify_password,
)
from omnium_accounts.web import CSRF_FIELD, csrf_ok, request_session, set_session_cookie
from omnium_db import PoolRoad, create_pool
from omnium_devstack.stack import dev_process_environ
from omnium_settings import Settings

PASSWORD = "correct horse battery"


@pytest.fixture
async def accounts(database_url: str) -> AsyncIterator[Accounts]:
    settings = Settings.from_env({}, database_url=database_url)
    pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="test", size=2)
    try:
        yield Accounts(pool, settings)
    finally:
        await pool.close()


def test_hash_is_salted_and_checks() -> None:
    one, two = hash_password(PASSWORD), hash_password(PASSWORD)
    # argon2id at OWASP's parameters: 19 MiB, 2 passes, 1 lane.
    assert one != two and one.startswith("$argon2id$v=19$m=19456,t=2,p=1$")
    assert verify_password(PASSWORD, one)
    assert not verify_password(PASSWORD + "!", one)
    assert not verify_password(PASSWORD, "not a hash")


def _scrypt_hash(password: str) -> str:
    """A hash as omnium made them before argon2id: scrypt, N=2^14, r=8, p=1."""
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1)
    return "$".join(
        (
            "scrypt",
            "16384",
            "8",
            "1",
            base64.b64encode(salt).decode(),
            base64.b64encode(digest).decode(),
        )
    )


async def test_an_old_scrypt_hash_signs_in_and_is_rehashed_with_argon2id(
    accounts: Accounts, db: asyncpg.Connection
) -> None:
    await accounts.create("old.timer", "Old Timer", "operator", PASSWORD)
    old = _scrypt_hash(PASSWORD)
    assert verify_password(PASSWORD, old) and not verify_password(PASSWORD + "!", old)
    await db.execute("UPDATE account SET password_hash = $1 WHERE login = 'old.timer'", old)
    with pytest.raises(SignInRefused):
        await accounts.sign_in("old.timer", "wrong password", screen="admin", address="127.0.0.1")
    # A wrong password changes nothing: the old hash stays until the right one is given.
    assert await db.fetchval("SELECT password_hash FROM account WHERE login = 'old.timer'") == old
    first = await accounts.sign_in("old.timer", PASSWORD, screen="admin", address="127.0.0.1")
    stored = await db.fetchval("SELECT password_hash FROM account WHERE login = 'old.timer'")
    assert stored.startswith("$argon2id$") and verify_password(PASSWORD, stored)
    # Same password: the session it was rehashed in, and later ones, stay good.
    second = await accounts.sign_in("old.timer", PASSWORD, screen="admin", address="127.0.0.1")
    assert await accounts.session(first.token) is not None
    assert await accounts.session(second.token) is not None
    assert (
        await db.fetchval("SELECT password_hash FROM account WHERE login = 'old.timer'") == stored
    )


async def test_sign_in_session_and_sign_out(accounts: Accounts, db: asyncpg.Connection) -> None:
    await accounts.create("ops.lead", "Ops Lead", "operator", PASSWORD)
    stored = await db.fetchval("SELECT password_hash FROM account WHERE login = 'ops.lead'")
    assert PASSWORD not in stored
    session = await accounts.sign_in("Ops.Lead", PASSWORD, screen="admin", address="127.0.0.1")
    assert session.account.role == "operator" and session.account.may("operator")
    assert not session.account.may("admin")
    # Only a hash of the token is kept: a copy of the table signs nobody in.
    assert (
        await db.fetchval(
            "SELECT count(*) FROM account_session WHERE token_hash = $1::bytea",
            session.token.encode(),
        )
        == 0
    )
    again = await accounts.session(session.token)
    assert again is not None and again.account.login == "ops.lead"
    assert again.csrf_token == session.csrf_token
    # A session long over is dropped at the next sign-in, not kept for ever.
    await db.execute("UPDATE account_session SET expires_at = now() - interval '1 day'")
    assert await accounts.session(session.token) is None
    await accounts.sign_in("ops.lead", PASSWORD, screen="admin", address="127.0.0.1")
    assert await db.fetchval("SELECT count(*) FROM account_session") == 1
    fresh = await accounts.sign_in("ops.lead", PASSWORD, screen="admin", address="127.0.0.1")
    await accounts.sign_out(fresh.token)
    assert await accounts.session(fresh.token) is None
    assert await accounts.session("made-up") is None


async def test_wrong_login_and_wrong_password_read_the_same(accounts: Accounts) -> None:
    await accounts.create("scorer1", "Scorer One", "scorer", PASSWORD)
    with pytest.raises(SignInRefused) as unknown:
        await accounts.sign_in("nobody", PASSWORD, screen="admin", address="127.0.0.1")
    with pytest.raises(SignInRefused) as wrong:
        await accounts.sign_in("scorer1", "wrong password", screen="admin", address="127.0.0.1")
    assert str(unknown.value) == str(wrong.value) == "the login or the password is wrong"


async def test_failed_sign_ins_slow_the_address_down_for_that_login(
    accounts: Accounts, db: asyncpg.Connection
) -> None:
    await accounts.create("viewer1", "Viewer", "viewer", PASSWORD)
    here = {"screen": "admin", "address": "192.0.2.7"}
    for _ in range(5):  # the free failures
        with pytest.raises(SignInRefused) as refused:
            await accounts.sign_in("viewer1", "guess", **here)
        assert type(refused.value) is SignInRefused and refused.value.retry_after == 0
    # Even the right password waits now, for the rest of the window, and it says how long.
    with pytest.raises(SignInThrottled) as sixth:
        await accounts.sign_in("viewer1", PASSWORD, **here)
    assert 60 < sixth.value.retry_after <= 300
    assert "too many failed sign-ins: try again in" in str(sixth.value)
    # Another address is not slowed down for the same login.
    elsewhere = await accounts.sign_in("viewer1", PASSWORD, screen="admin", address="192.0.2.8")
    assert elsewhere.account.login == "viewer1"
    await db.execute("UPDATE sign_in_throttle SET window_ends = now()")
    session = await accounts.sign_in("viewer1", PASSWORD, **here)
    assert session.account.login == "viewer1"


async def test_disabled_account_cannot_sign_in_or_use_its_session(
    accounts: Accounts, db: asyncpg.Connection
) -> None:
    await accounts.create("gone", "Gone", "viewer", PASSWORD)
    session = await accounts.sign_in("gone", PASSWORD, screen="admin", address="127.0.0.1")
    await db.execute("UPDATE account SET disabled = true WHERE login = 'gone'")
    assert await accounts.session(session.token) is None
    with pytest.raises(SignInRefused):
        await accounts.sign_in("gone", PASSWORD, screen="admin", address="127.0.0.1")


async def test_cached_sessions_end_within_their_window(
    accounts: Accounts, db: asyncpg.Connection
) -> None:
    """The gateway's copy of a session: no write per tap, sign-out at once, disabling soon."""
    settings = accounts._settings
    await accounts.create("tapper", "Tapper", "scorer", PASSWORD)
    session = await accounts.sign_in(
        "tapper", PASSWORD, screen="scorer-console", address="127.0.0.1"
    )
    slow = Accounts(accounts._pool, settings, cache_seconds=600.0)
    assert (await slow.session(session.token)) is not None
    seen = await db.fetchval("SELECT last_seen_at FROM account_session")
    assert (await slow.session(session.token)) is not None
    # The second read was the copy: the session row was not touched.
    assert await db.fetchval("SELECT last_seen_at FROM account_session") == seen
    await slow.sign_out(session.token)
    assert await slow.session(session.token) is None

    session = await accounts.sign_in(
        "tapper", PASSWORD, screen="scorer-console", address="127.0.0.1"
    )
    quick = Accounts(accounts._pool, settings, cache_seconds=0.2)
    assert (await quick.session(session.token)) is not None
    await db.execute("UPDATE account SET disabled = true WHERE login = 'tapper'")
    await asyncio.sleep(0.3)
    assert await quick.session(session.token) is None


async def test_turning_an_account_off_ends_its_sessions_and_on_lets_it_back(
    accounts: Accounts, db: asyncpg.Connection
) -> None:
    await accounts.create("lost.phone", "Lost Phone", "scorer", PASSWORD)
    one = await accounts.sign_in(
        "lost.phone", PASSWORD, screen="scorer-console", address="127.0.0.1"
    )
    two = await accounts.sign_in(
        "lost.phone", PASSWORD, screen="scorer-console", address="127.0.0.1"
    )
    # A copy in a gateway's session cache goes too, not at the end of its window.
    cached = Accounts(accounts._pool, accounts._settings, cache_seconds=600.0)
    assert await cached.session(one.token) is not None
    assert await cached.set_disabled("lost.phone", True) == 2
    assert await cached.session(one.token) is None and await accounts.session(two.token) is None
    with pytest.raises(SignInRefused):
        await accounts.sign_in("lost.phone", PASSWORD, screen="scorer-console", address="127.0.0.1")
    (view,) = [v for v in await accounts.overview() if v.login == "lost.phone"]
    assert view.disabled and view.sessions == 0
    assert await accounts.set_disabled("lost.phone", False) == 0
    assert (
        await accounts.sign_in("lost.phone", PASSWORD, screen="scorer-console", address="127.0.0.1")
    ).token


async def test_a_new_password_ends_other_sessions(accounts: Accounts) -> None:
    await accounts.create("forgetful", "Forgetful", "operator", PASSWORD)
    mine = await accounts.sign_in("forgetful", PASSWORD, screen="admin", address="127.0.0.1")
    other = await accounts.sign_in("forgetful", PASSWORD, screen="admin", address="127.0.0.1")
    (view,) = [v for v in await accounts.overview() if v.login == "forgetful"]
    assert view.sessions == 2 and view.last_seen_at is not None
    new = PASSWORD + " again"
    assert await accounts.set_password("forgetful", new, keep_token=mine.token) == 1
    assert await accounts.session(mine.token) is not None
    assert await accounts.session(other.token) is None
    assert (
        await accounts.sign_in("forgetful", new, screen="admin", address="127.0.0.1")
    ).account.login == "forgetful"
    with pytest.raises(AccountError, match="no account with the login 'nobody'"):
        await accounts.set_password("nobody", new)


async def test_each_change_records_who_made_it_and_a_refused_one_records_nothing(
    accounts: Accounts, db: asyncpg.Connection
) -> None:
    ada = ("Ada Admin", "account:1")
    await accounts.create("court3", "Court 3", "scorer", PASSWORD, by=ada)
    await accounts.set_password("court3", PASSWORD + "!", by=ada)
    await accounts.set_role("court3", "operator", by=ada)
    await accounts.set_disabled("court3", True)  # the command line
    await accounts.sign_out_everywhere("court3", by=ada)
    await accounts.set_disabled("court3", False, by=ada)
    with pytest.raises(AccountError):
        await accounts.set_role("court3", "boss", by=ada)
    with pytest.raises(AccountError):
        await accounts.sign_out_everywhere("nobody", by=ada)
    rows = await db.fetch(
        "SELECT login, change, by_name, by_source FROM account_change ORDER BY id"
    )
    assert [(r["login"], r["change"], r["by_name"]) for r in rows] == [
        ("court3", "made (scorer)", "Ada Admin"),
        ("court3", "new password", "Ada Admin"),
        ("court3", "role operator", "Ada Admin"),
        ("court3", "off", "the command line"),
        ("court3", "signed out everywhere", "Ada Admin"),
        ("court3", "on", "Ada Admin"),
    ]
    assert rows[0]["by_source"] == "account:1" and rows[3]["by_source"] == "cli"
    (view,) = await accounts.overview()
    assert (view.last_change, view.last_change_by) == ("on", "Ada Admin")


async def test_two_admins_turning_each_other_off_at_once_leave_one(accounts: Accounts) -> None:
    await accounts.create("left", "Left", "admin", PASSWORD)
    await accounts.create("right", "Right", "admin", PASSWORD)
    results = await asyncio.gather(
        accounts.set_disabled("left", True),
        accounts.set_disabled("right", True),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, AccountError)]
    assert len(refused) == 1 and "only admin" in str(refused[0])
    assert [v.disabled for v in await accounts.overview()].count(False) == 1


async def test_the_last_admin_is_never_locked_out(accounts: Accounts) -> None:
    await accounts.create("only.admin", "Only Admin", "admin", PASSWORD)
    with pytest.raises(AccountError, match="only admin who can sign in"):
        await accounts.set_disabled("only.admin", True)
    with pytest.raises(AccountError, match="only admin who can sign in"):
        await accounts.set_role("only.admin", "operator")
    await accounts.create("second.admin", "Second Admin", "admin", PASSWORD)
    await accounts.set_role("only.admin", "operator")
    with pytest.raises(AccountError, match="only admin"):
        await accounts.set_disabled("second.admin", True)
    with pytest.raises(AccountError, match="the role 'boss' is unknown"):
        await accounts.set_role("only.admin", "boss")
    roles = {v.login: (v.role, v.disabled) for v in await accounts.overview()}
    assert roles == {"only.admin": ("operator", False), "second.admin": ("admin", False)}


@pytest.mark.parametrize(
    ("login", "role", "password", "message"),
    [
        ("Bad Login", "viewer", PASSWORD, "is not allowed"),
        ("fine", "boss", PASSWORD, "the role 'boss' is unknown"),
        ("fine", "viewer", "short", "too short: use at least 10"),
    ],
)
async def test_bad_accounts_are_refused_plainly(
    accounts: Accounts, login: str, role: str, password: str, message: str
) -> None:
    with pytest.raises(AccountError, match=message):
        await accounts.create(login, "Someone", role, password)


async def test_a_login_is_made_once(accounts: Accounts) -> None:
    await accounts.create("twice", "Twice", "viewer", PASSWORD)
    with pytest.raises(AccountError, match="exists already"):
        await accounts.create("twice", "Twice", "viewer", PASSWORD)


def _cli(database_url: str, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dev_process_environ()
    env["OMNIUM_DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "omnium_accounts", *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_cli_makes_the_first_admin(database_url: str, accounts: Accounts) -> None:
    made = await asyncio.to_thread(
        _cli,
        database_url,
        PASSWORD + "\n",
        "create",
        "--login",
        "first.admin",
        "--role",
        "admin",
        "--password-stdin",
    )
    assert made.returncode == 0, made.stderr
    assert "made the admin account 'first.admin'" in made.stdout
    session = await accounts.sign_in("first.admin", PASSWORD, screen="admin", address="127.0.0.1")
    assert session.account.role == "admin"
    short = await asyncio.to_thread(
        _cli,
        database_url,
        "short\n",
        "create",
        "--login",
        "second",
        "--role",
        "admin",
        "--password-stdin",
    )
    assert short.returncode == 2 and "too short" in short.stderr
    listed = await asyncio.to_thread(_cli, database_url, "", "list")
    assert "first.admin" in listed.stdout and "second" not in listed.stdout


async def test_cli_turns_an_account_off_and_signs_it_out(
    database_url: str, accounts: Accounts, db: asyncpg.Connection
) -> None:
    await accounts.create("tablet3", "Court 3 tablet", "scorer", PASSWORD)
    await accounts.sign_in("tablet3", PASSWORD, screen="scorer-console", address="127.0.0.1")
    await accounts.sign_in("tablet3", PASSWORD, screen="scorer-console", address="127.0.0.1")
    off = await asyncio.to_thread(_cli, database_url, "", "disable", "--login", "tablet3")
    assert off.returncode == 0, off.stderr
    assert "turned 'tablet3' off; ended 2 session(s)" in off.stdout
    by = await db.fetchval("SELECT by_name FROM account_change WHERE change = 'off'")
    assert by.startswith("the command line (")
    listed = await asyncio.to_thread(_cli, database_url, "", "list")
    assert "(off)" in next(line for line in listed.stdout.splitlines() if "tablet3" in line)
    on = await asyncio.to_thread(_cli, database_url, "", "enable", "--login", "tablet3")
    assert on.returncode == 0 and "turned 'tablet3' on" in on.stdout
    await accounts.sign_in("tablet3", PASSWORD, screen="scorer-console", address="127.0.0.1")
    out = await asyncio.to_thread(_cli, database_url, "", "sign-out", "--login", "tablet3")
    assert "ended 1 session(s) of 'tablet3'" in out.stdout
    missing = await asyncio.to_thread(_cli, database_url, "", "disable", "--login", "nobody")
    assert missing.returncode == 2 and "no account with the login 'nobody'" in missing.stderr


async def test_csrf_token_is_required_on_forms(accounts: Accounts) -> None:
    await accounts.create("formuser", "Form User", "operator", PASSWORD)
    # Plain HTTP: production's Secure cookie would never come back.
    settings = Settings.from_env({"OMNIUM_ENVIRONMENT": "development"})

    async def sign_in(request: web.Request) -> web.Response:
        session = await accounts.sign_in("formuser", PASSWORD, screen="test", address="127.0.0.1")
        response = web.json_response({"csrf": session.csrf_token})
        set_session_cookie(response, session, settings)
        return response

    async def act(request: web.Request) -> web.Response:
        session = await request_session(request, accounts)
        if session is None:
            return web.Response(status=401)
        return web.Response(status=204 if await csrf_ok(request, session) else 403)

    app = web.Application()
    app.router.add_post("/sign-in", sign_in)
    app.router.add_post("/act", act)
    async with TestClient(TestServer(app)) as client:
        assert (await client.post("/act")).status == 401
        signed = await client.post("/sign-in")
        assert "HttpOnly" in signed.headers["Set-Cookie"]
        assert "SameSite=Lax" in signed.headers["Set-Cookie"]
        csrf = (await signed.json())["csrf"]
        assert (await client.post("/act", data={"x": "1"})).status == 403
        assert (await client.post("/act", data={CSRF_FIELD: "forged"})).status == 403
        assert (await client.post("/act", data={CSRF_FIELD: csrf})).status == 204
        assert (await client.post("/act", headers={"X-CSRF-Token": csrf})).status == 204
