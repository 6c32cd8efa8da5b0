"""The two consoles' doors: a session opens only the console it was made on, sign-in sends a
person only to a local page, crafted tokens and JSON are plain 400s, every answer carries the
security headers, and a fuzzer finds no 500 on either sign-in."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnium_settings import Settings
from tests.security.test_sign_in import (
    PASSWORD,
    WRONG,
    Doors,
    admin_sign_in,
    consoles,
    scorer_sign_in,
)
from tests.support.servers import Servers

UNIT = str(uuid.uuid4())


@pytest.fixture
async def doors(database_url: str, servers: Servers) -> AsyncIterator[Doors]:
    async with consoles(database_url, servers.redis_url) as doors:
        for login, role in (("mina", "scorer"), ("olga", "operator"), ("ada", "admin")):
            await doors.accounts.create(login, login.title(), role, PASSWORD)
        yield doors


async def test_a_session_opens_only_the_console_it_was_made_on(doors: Doors) -> None:
    async with doors.scorer() as phone, doors.admin() as desk:
        ada_on_scorer = await scorer_sign_in(phone, "ada")
        assert (await admin_sign_in(desk, "ada")).status_code == 303
        admin_cookie = desk.cookies["omnium_session"]
        olga = await scorer_sign_in(phone, "olga")
        scorer_cookie = phone.cookies["omnium_session"]
    async with doors.scorer() as phone, doors.admin() as desk:
        # The admin's session, carried to the scorer console: not signed in there.
        phone.cookies.set("omnium_session", admin_cookie)
        admin_there = await phone.get("/score/api/me")
        admin_act = await phone.post(
            f"/score/api/matches/{UNIT}/actions", json={"client_id": "x:1", "kind": "goal"}
        )
        # The operator's scorer-console session, carried to the admin console: sign in first.
        desk.cookies.set("omnium_session", scorer_cookie)
        scorer_there = await desk.get("/integrations")
    assert ada_on_scorer.status_code == 401 and ada_on_scorer.json() == WRONG
    assert olga.status_code == 200
    assert admin_there.status_code == 401 and admin_act.status_code == 401
    assert scorer_there.status_code == 303
    assert scorer_there.headers["location"].startswith("/sign-in?next=")


@pytest.mark.parametrize(
    "next_path",
    [
        "/%09/evil.example",
        "/\t/evil.example",
        "//evil",
        "/\\evil",
        "https://evil",
        "/%2F%2Fevil",
        "/%5Cevil",
        " /evil",
        "/ok\r\nSet-Cookie: x=1",
        "javascript:alert(1)",
    ],
)
async def test_sign_in_sends_a_person_only_to_a_local_page(doors: Doors, next_path: str) -> None:
    async with doors.admin() as desk:
        form = await desk.get("/sign-in", params={"next": next_path})
        hidden = re.search(r'name="next" value="([^"]*)"', form.text)
        answer = await admin_sign_in(desk, "olga", next_path=next_path)
    assert hidden is not None and hidden[1] == "/"
    assert answer.status_code == 303 and answer.headers["location"] == "/"


async def test_a_local_next_is_kept(doors: Doors) -> None:
    async with doors.admin() as desk:
        answer = await admin_sign_in(desk, "olga", next_path="/runs?integration=scout-1")
    assert answer.headers["location"] == "/runs?integration=scout-1"


async def test_a_crafted_csrf_token_is_a_plain_400(doors: Doors) -> None:
    token = "jeton-\u00e9\u2603".encode()
    async with doors.scorer() as phone, doors.admin() as desk:
        await scorer_sign_in(phone, "mina")
        act = await phone.post(
            f"/score/api/matches/{UNIT}/actions",
            json={"client_id": "x:1", "kind": "goal"},
            headers={"X-CSRF-Token": token},
        )
        out = await phone.post("/score/api/sign-out", headers={"X-CSRF-Token": token})
        form = await desk.get("/sign-in")
        sign_in = await desk.post(
            "/sign-in",
            data={"csrf_token": "jeton-\u00e9", "login": "olga", "password": PASSWORD},
        )
        assert form.status_code == 200
        assert (await admin_sign_in(desk, "olga")).status_code == 303
        pause = await desk.post("/integrations/x/pause", data={"csrf_token": "jeton-\u00e9"})
    for answer in (act, out):
        assert answer.status_code == 400
        assert "the security token sent is not one this console makes" in answer.json()["error"]
    assert sign_in.status_code == 400 and "cannot be read" in sign_in.text
    assert pause.status_code == 400 and "reload the page" in pause.text


@pytest.mark.parametrize(
    ("path", "body", "said"),
    [
        (f"/score/api/matches/{UNIT}/actions", '{"kind": "goal", "client_at": 1e300}', "client_at"),
        (f"/score/api/matches/{UNIT}/actions", '{"kind": "goal", "client_at": 1e20}', "client_at"),
        (f"/score/api/matches/{UNIT}/actions", '{"kind": "goal", "client_at": -1}', "client_at"),
        (f"/score/api/matches/{UNIT}/actions", '{"kind": "goal", "side": 1e400}', "cannot"),
        (f"/score/api/matches/{UNIT}/actions", '{"kind": "goal", "undo_seq": "x"}', "cannot"),
        (f"/score/api/matches/{UNIT}/actions", "[" * 20_000 + "]" * 20_000, "cannot"),
        (f"/score/api/matches/{UNIT}/actions", '"a string"', "cannot"),
        ("/score/api/sync", '{"actions": [{"kind": "goal", "client_at": 1e300}]}', "client_at"),
        ("/score/api/sync", '{"actions": 5}', "cannot"),
        ("/score/api/sync", '{"actions": [{"fields": {"x": 1%s}}]}' % ("0" * 400), "cannot"),
        ("/score/api/sign-in", '{"login": ["mina"], "password": "x"}', "string"),
        ("/score/api/sign-in", "{" * 50_000, "JSON"),
    ],
)
async def test_crafted_json_is_a_plain_400(doors: Doors, path: str, body: str, said: str) -> None:
    async with doors.scorer() as phone:
        csrf = (await scorer_sign_in(phone, "mina")).json()["csrf"]
        answer = await phone.post(
            path,
            content=body,
            headers={"X-CSRF-Token": csrf, "Content-Type": "application/json"},
        )
    assert answer.status_code == 400, answer.text
    assert said in answer.json()["error"]


@pytest.mark.parametrize(
    "query",
    ["recent=\u00b2", "recent=" + "9" * 5000, "after=" + "9" * 5000],
    ids=["superscript", "5000 digits", "after of 5000 digits"],
)
async def test_crafted_numbers_in_a_match_read_are_a_plain_400(doors: Doors, query: str) -> None:
    async with doors.scorer() as phone:
        await scorer_sign_in(phone, "mina")
        answer = await phone.get(f"/score/api/matches/{UNIT}?{query}")
    assert answer.status_code == 400 and "0 to" in answer.json()["error"]


def _assert_console_headers(answer: httpx.Response, *, production: bool) -> None:
    policy = answer.headers.get("content-security-policy", "")
    where = f"{answer.request.method} {answer.request.url.path}"
    assert "frame-ancestors 'none'" in policy, where
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy, where
    assert answer.headers.get("x-content-type-options") == "nosniff", where
    assert answer.headers.get("referrer-policy") == "same-origin", where
    assert ("strict-transport-security" in answer.headers) is production, where


@pytest.mark.parametrize("environment", ["development", "production"])
async def test_both_consoles_send_the_security_headers(database_url: str, environment: str) -> None:
    # Plain HTTP here, so the cookie is not Secure even in production: not what this checks.
    async with consoles(
        database_url, environment=environment, session_cookie_secure=False
    ) as doors:
        await doors.accounts.create("olga", "Olga Op", "operator", PASSWORD)
        async with doors.scorer() as phone, doors.admin() as desk:
            answers = [
                await phone.get("/score/"),
                await phone.get("/score/static/app.js"),
                await phone.get("/score/sw.js"),
                await phone.get("/score/api/me"),
                await scorer_sign_in(phone, "olga", "guess"),
                await scorer_sign_in(phone, "olga"),
                await phone.get("/score/api/me"),
                await desk.get("/sign-in"),
                await desk.get("/static/console.css"),
                await desk.get("/runs"),
                await admin_sign_in(desk, "olga", "guess"),
                await admin_sign_in(desk, "olga"),
                await desk.get("/accounts"),
            ]
    assert [a.status_code for a in answers] == [
        *(200, 200, 200, 401, 401, 200, 200),
        *(200, 200, 303, 401, 303, 403),
    ]
    for answer in answers:
        _assert_console_headers(answer, production=environment == "production")
    hsts = answers[0].headers.get("strict-transport-security")
    assert hsts is None or hsts == f"max-age={Settings.from_env({}).sign_in.hsts_seconds}"


_TEXT = st.text(max_size=80)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
_NEXT = st.one_of(
    _TEXT,
    st.sampled_from(["/%09/evil.example", "//evil", "/\\evil", "https://evil", "/runs"]),
)


async def test_fuzzing_both_sign_ins_finds_no_server_error(
    database_url: str, servers: Servers
) -> None:
    """Random logins, passwords, next values, CSRF tokens and bodies: never a 5xx but the
    designed 503 (every password check taken), never a traceback."""
    async with consoles(
        database_url,
        servers.redis_url,
        # A fuzzer is one address making thousands of failures: it must reach the doors.
        sign_in_address_failures=1_000_000,
        sign_in_login_failures=1_000_000,
    ) as doors:
        await doors.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        seen: list[tuple[str, int]] = []

        @settings(
            max_examples=150,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(
            login=st.one_of(_TEXT, st.sampled_from(["mina", "MINA ", "ada", "x" * 5000])),
            password=st.one_of(_TEXT, st.just(PASSWORD)),
            next_path=_NEXT,
            token=_TEXT,
            body=st.one_of(_JSON, st.binary(max_size=200)),
        )
        def fuzz(login: str, password: str, next_path: str, token: str, body: object) -> None:
            with httpx.Client(base_url=doors.scorer_url, timeout=30) as phone:
                raw = body if isinstance(body, bytes) else None
                answers = [
                    phone.post("/score/api/sign-in", json={"login": login, "password": password}),
                    phone.post(
                        "/score/api/sign-in",
                        content=raw if raw is not None else httpx_json(body),
                        headers={"Content-Type": "application/json"},
                    ),
                    phone.post(
                        f"/score/api/matches/{UNIT}/actions",
                        content=raw if raw is not None else httpx_json(body),
                        headers={"X-CSRF-Token": _header(token)},
                    ),
                ]
            with httpx.Client(base_url=doors.admin_url, timeout=30) as desk:
                page = desk.get("/sign-in", params={"next": next_path})
                cookie = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
                answers += [
                    page,
                    desk.post(
                        "/sign-in",
                        data={
                            "csrf_token": token if token else (cookie[1] if cookie else ""),
                            "login": login,
                            "password": password,
                            "next": next_path,
                        },
                    ),
                    desk.post("/sign-in", content=raw or b"", headers=_form()),
                ]
            for answer in answers:
                seen.append((answer.request.url.path, answer.status_code))
                assert answer.status_code < 500 or answer.status_code == 503, (
                    answer.request.url,
                    answer.status_code,
                    answer.text[:300],
                )
                assert "Traceback" not in answer.text

        # Hypothesis runs in a thread; this loop keeps serving both consoles meanwhile.
        await asyncio.to_thread(fuzz)
    assert len(seen) >= 150 * 6
    assert {status for _, status in seen} >= {400, 401}


def httpx_json(value: object) -> bytes:
    return json.dumps(value).encode()


def _header(text: str) -> bytes:
    """A header value as a crafted client can send one (HTTP carries no control characters)."""
    return "".join(c for c in text if c >= " " and c != "\x7f").strip().encode() or b"x"


def _form() -> dict[str, str]:
    return {"Content-Type": "application/x-www-form-urlencoded"}
