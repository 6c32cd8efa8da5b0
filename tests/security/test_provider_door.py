"""The provider push door (POST /v1/providers/{provider}/messages) against a real gateway, real
scoring and command, PostgreSQL and Redis: what a stranger, a crafted message or a flood gets."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from dev.games_day import DEV_PROVIDERS
from omnium_accounts import AccountsUnavailable
from omnium_devstack.stack import DEV_PROVIDERS_DIR, dev_environment
from omnium_gateway import ScorerRoutes, make_app
from omnium_scorer_web._provider_door import DoorLimits, ProviderKeys
from omnium_scoring import ProviderFileError, load_provider_file
from omnium_scoring._providers import load_provider_folder
from omnium_settings import Settings, SettingsError, deploy_problems
from tests.support.command import settings_for
from tests.support.games import make_games
from tests.support.scoring import ConsoleSite, running_console, running_scoring
from tests.support.servers import Servers

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "data" / "odf_play_by_play.xml"
PATH = "/v1/providers/odf-fbl/messages"
KEY = {"X-Api-Key": "test-odf-key", "Content-Type": "application/xml"}


def message(unit_code: str, text: str | None = None) -> str:
    return (text or SAMPLE.read_text()).replace("{unit_code}", unit_code)


@asynccontextmanager
async def door(
    database_url: str, servers: Servers, **overrides: Any
) -> AsyncIterator[tuple[ConsoleSite, httpx.AsyncClient]]:
    """The gateway (with Redis, a prefix of its own) in front of scoring, and a client."""
    overrides.setdefault("gateway_redis_prefix", f"test:{uuid.uuid4().hex[:10]}:")
    async with (
        running_console(database_url, servers.redis_url, **overrides) as site,
        httpx.AsyncClient(base_url=site.url, timeout=60) as http,
    ):
        yield site, http


@asynccontextmanager
async def another_gateway(site: ConsoleSite, redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A second gateway copy, as a load balancer spreads pushes over copies: same settings,
    same Redis, same scoring."""
    settings = site.scoring.settings.replace(
        scoring_address=f"127.0.0.1:{site.scoring.port}",
        redis_url=redis_url,
    )
    app = make_app(settings, route_sets=[ScorerRoutes(settings)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{runner.addresses[0][1]}", timeout=60
        ) as http:
            yield http
    finally:
        await runner.cleanup()


async def kept(db: asyncpg.Connection) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM provider_message")
    return count


async def actions(db: asyncpg.Connection) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM match_action")
    return count


# -- the demo provider is dev-only -------------------------------------------------------------


def test_the_image_providers_folder_has_no_provider_with_its_key_written_in() -> None:
    """providers/ is what the image carries: nothing in it may let a stranger in."""
    assert sorted(p.name for p in (REPO / "providers").iterdir()) == ["README.md"]
    production = Settings.from_env({"OMNIUM_ENVIRONMENT": "production"})
    assert not [p for p in deploy_problems(production) if "providers" in p]


def test_the_dev_stack_names_the_demo_provider_and_production_refuses_its_key() -> None:
    env = dev_environment()
    assert env["OMNIUM_SCORING_PROVIDERS_DIR"] == str(DEV_PROVIDERS_DIR)
    assert DEV_PROVIDERS == DEV_PROVIDERS_DIR  # what `make run` names
    assert [spec.code for spec in load_provider_folder(DEV_PROVIDERS_DIR)] == ["odf-demo"]
    with pytest.raises(ProviderFileError) as refused:
        load_provider_folder(DEV_PROVIDERS_DIR, production=True)
    assert "odf-demo.toml: api_key: is written in the file, which production refuses" in str(
        refused.value
    )
    dev_folder = {"OMNIUM_SCORING_PROVIDERS_DIR": str(DEV_PROVIDERS_DIR)}
    problems = deploy_problems(Settings.from_env(dev_folder))
    assert any("odf-demo.toml: api_key is written in the file" in p for p in problems)


# -- provider files: hashed keys, passwords from mounted files --------------------------------


def _file(tmp_path: Path, *lines: str, code: str = "feed") -> Path:
    path = tmp_path / f"{code}.toml"
    path.write_text(
        "\n".join([f'code = "{code}"', 'event = "AG2026"', *lines, "[actions]", 'G = "goal"'])
    )
    return path


def test_a_provider_file_keeps_keys_and_passwords_out_of_itself_in_production(
    tmp_path: Path,
) -> None:
    plain_key = _file(tmp_path, 'mode = "push"', 'api_key = "a-key-in-the-file"', code="feed-a")
    plain_password = _file(
        tmp_path,
        'mode = "pull"',
        'address = "https://x.example/f"',
        'password = "pw"',
        code="feed-b",
    )
    bad_hash = _file(tmp_path, 'mode = "push"', 'api_key_sha256 = "not hex"', code="feed-c")
    lost_secret = _file(
        tmp_path,
        'mode = "pull"',
        'address = "https://x.example/f"',
        'password_file = "gone"',
        code="feed-d",
    )
    assert load_provider_file(plain_key).api_key_hash is not None  # development takes it
    for path, key in (
        (plain_key, "api_key"),
        (plain_password, "password"),
        (bad_hash, "api_key_sha256"),
        (lost_secret, "password_file"),
    ):
        with pytest.raises(ProviderFileError) as refused:
            load_provider_file(path, production=True)
        assert str(refused.value).startswith(f"{path}: {key}: "), refused.value


async def test_a_pull_provider_reads_its_password_from_the_mounted_file_at_each_pull(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    await make_games(db, units=1)
    secret = tmp_path / "password"
    secret.write_text("first-password\n")
    seen: list[str | None] = []

    async def serve(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(body=b"<nothing/>", content_type="application/xml")

    app = web.Application()
    app.router.add_get("/f", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    _file(
        tmp_path,
        'mode = "pull"',
        f'address = "http://127.0.0.1:{runner.addresses[0][1]}/f"',
        'login = "omnium"',
        'password_file = "password"',
        code="feed-pull",
    )
    try:
        async with running_scoring(database_url, scoring_providers_dir=str(tmp_path)) as scoring:
            providers = scoring.app.providers
            assert providers is not None
            async with httpx.AsyncClient() as http:
                await providers.pull_once("feed-pull", http)
                secret.write_text("rotated-password\n")  # the secret store rotated it
                await providers.pull_once("feed-pull", http)
    finally:
        await runner.cleanup()
    assert seen == [
        httpx.BasicAuth("omnium", "first-password")._auth_header,
        httpx.BasicAuth("omnium", "rotated-password")._auth_header,
    ]
    assert await db.fetchval("SELECT secret FROM provider WHERE code = 'feed-pull'") is None


# -- who may knock -----------------------------------------------------------------------------


async def test_an_unknown_provider_gets_the_answer_a_wrong_key_gets(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    body = message(games.unit_codes[games.units[0]])
    async with door(database_url, servers) as (_, http):
        wrong_key = await http.post(PATH, content=body, headers={"X-Api-Key": "a-guess"})
        unknown = await http.post(
            "/v1/providers/nobody/messages", content=body, headers={"X-Api-Key": "a-guess"}
        )
        not_a_code = await http.post(
            "/v1/providers/..%2F..%2Fetc/messages", content=body, headers={"X-Api-Key": "a-guess"}
        )
    assert wrong_key.status_code == unknown.status_code == not_a_code.status_code == 401
    assert wrong_key.json() == unknown.json() == not_a_code.json()
    assert "X-Api-Key" in wrong_key.json()["error"]
    assert await kept(db) == 0


async def test_a_stranger_guessing_keys_is_stopped_at_the_door_even_with_the_right_key(
    db: asyncpg.Connection,
    database_url: str,
    servers: Servers,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Keyed on the client's address (behind our proxy, X-Forwarded-For) and shared by every
    gateway copy: the stranger's next guess is refused at the door, whichever copy it
    reaches, while the real provider, from its own address, goes on."""
    games = await make_games(db, units=1)
    body = message(games.unit_codes[games.units[0]])
    stranger = {"X-Forwarded-For": "203.0.113.66"}
    provider = {**KEY, "X-Forwarded-For": "198.51.100.7"}
    caplog.set_level(logging.INFO, logger="omnium_scoring._providers")
    async with (
        door(
            database_url,
            servers,
            trusted_proxies=("127.0.0.1/32",),
            provider_wrong_key_burst=4,
            provider_wrong_key_per_minute=0.6,  # one more guess every 100 s
        ) as (site, http),
        another_gateway(site, servers.redis_url) as other,
    ):
        guesses = []
        for n in range(8):
            copy = http if n % 2 else other
            guesses.append(
                await copy.post(PATH, content=body, headers={**stranger, "X-Api-Key": f"g{n}"})
            )
        with_the_right_key = await http.post(PATH, content=body, headers={**KEY, **stranger})
        from_the_provider = await other.post(PATH, content=body, headers=provider)
    assert [g.status_code for g in guesses] == [401] * 4 + [429] * 4
    refused = guesses[-1]
    assert int(refused.headers["Retry-After"]) >= 1
    assert "too many pushes with a wrong or missing key" in refused.json()["error"]
    # The gateway knows the keys' hashes: no wrong key ever reached scoring.
    looked_at = [r for r in caplog.records if "not its key" in r.getMessage()]
    assert looked_at == []
    assert with_the_right_key.status_code == 429
    assert from_the_provider.status_code == 200
    assert from_the_provider.json()["outcome"] == "accepted"


async def test_strangers_pushing_with_made_up_keys_do_not_spend_the_providers_rate(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    """The provider's own rate is spent only by pushes with its key: a flood of wrong keys
    from many addresses cannot silence the real feed."""
    games = await make_games(db, units=1)
    body = message(games.unit_codes[games.units[0]])
    async with door(database_url, servers, trusted_proxies=("127.0.0.1/32",), provider_burst=3) as (
        _,
        http,
    ):
        strangers = [
            await http.post(
                PATH,
                content=body,
                headers={"X-Forwarded-For": f"203.0.113.{n % 5}", "X-Api-Key": f"guess-{n}"},
            )
            for n in range(10)
        ]
        provider = [
            await http.post(PATH, content=body, headers={**KEY, "X-Forwarded-For": "198.51.100.7"})
            for _ in range(3)
        ]
    assert [s.status_code for s in strangers] == [401] * 10
    assert [p.status_code for p in provider] == [200] * 3
    assert await kept(db) == 3


async def test_the_door_knows_a_rotated_key_at_its_first_push_and_forgets_the_old_one(
    db: asyncpg.Connection, database_url: str
) -> None:
    """The key hashes come from the provider table (scoring writes them as it registers a
    provider file): a key that matches none is read again, so a rotation works at once."""
    await db.execute(
        "INSERT INTO provider (code, name, format, mode, api_key_hash, event_code)"
        " VALUES ('feed-a', 'Feed A', 'odf', 'push', sha256('old-key'), 'AG2026')"
    )
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        keys = ProviderKeys(settings_for(database_url, provider_keys_seconds=3600), lambda: pool)
        before = (await keys.matches("feed-a", "old-key"), await keys.matches("feed-a", "new-key"))
        await db.execute(
            "UPDATE provider SET api_key_hash = sha256('new-key') WHERE code = 'feed-a'"
        )
        # Trusted for an hour, yet the new key is read again at its first push (after the
        # once-a-second bound on re-reads).
        await asyncio.sleep(ProviderKeys.REREAD_ON_MISS_SECONDS)
        after = (await keys.matches("feed-a", "new-key"), await keys.matches("feed-a", "old-key"))
        unknown = await keys.matches("nobody", "new-key")
    finally:
        await pool.close()
    assert before == (True, False)
    assert after == (True, False)
    assert unknown is False


async def test_while_the_keys_cannot_be_read_scoring_decides() -> None:
    def no_pool() -> asyncpg.Pool:
        raise AccountsUnavailable("the people pool is not attached yet")

    keys = ProviderKeys(settings_for(""), no_pool)
    assert await keys.matches("odf-fbl", "test-odf-key") is None


async def test_a_provider_past_its_rate_gets_429_with_retry_after(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    body = message(games.unit_codes[games.units[0]])
    async with (
        door(database_url, servers, provider_burst=3, provider_rate_per_second=0.01) as (
            site,
            http,
        ),
        another_gateway(site, servers.redis_url) as other,
    ):
        answers = [
            await (http if n % 2 else other).post(PATH, content=body, headers=KEY) for n in range(5)
        ]
    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
    assert int(answers[3].headers["Retry-After"]) >= 1
    assert answers[3].json()["error"].startswith("odf-fbl is sending more than 0.01 messages")
    assert await kept(db) == 3


# -- how much it may send ----------------------------------------------------------------------


async def test_a_body_is_read_up_to_its_bound_and_no_further(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    text = message(games.unit_codes[games.units[0]])
    # A long message within the bound (500 kB of comment) is kept: the app's 64 KiB cap
    # refused it before the setting counted.
    long_one = text.replace("<Actions>", "<Actions><!--" + "x" * 500_000 + "-->")
    async with door(database_url, servers) as (site, http):
        taken = await http.post(PATH, content=long_one, headers=KEY)
        over = await http.post(PATH, content=b"x" * 1_000_001, headers=KEY)
        host, port = site.url.removeprefix("http://").split(":")
        # A gigabyte announced, and a stream with no length: the answer comes before either
        # is sent, so nothing near that size is ever held.
        announced = await _raw_post(host, int(port), {"Content-Length": "1000000000"}, b"")
        streamed = await _raw_post(
            host,
            int(port),
            {"Transfer-Encoding": "chunked"},
            b"".join(b"%x\r\n%s\r\n" % (100_000, b"y" * 100_000) for _ in range(11)),
        )
    assert taken.status_code == 200 and taken.json()["actions"] == 5
    assert over.status_code == 413
    assert over.json()["error"].startswith("the message is over 1000000 bytes, the most taken")
    assert announced.startswith(b"HTTP/1.1 413") and b"the message is over" in announced
    assert streamed.startswith(b"HTTP/1.1 413") and b"the message is over" in streamed
    assert await kept(db) == 1


async def _raw_post(host: str, port: int, headers: dict[str, str], sent: bytes) -> bytes:
    """Send the head and `sent` of a body that never ends, and read the answer."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(
            f"POST {PATH} HTTP/1.1\r\nHost: {host}\r\nX-Api-Key: test-odf-key\r\n"
            f"Content-Type: application/xml\r\n{head}\r\n".encode()
            + sent
        )
        await writer.drain()
        # Generous: a door that reads to the end never answers at all, so this does not race.
        answer = await asyncio.wait_for(reader.read(4096), timeout=60)
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            more = await asyncio.wait_for(reader.read(4096), timeout=60)
            if not more:
                break
            answer += more
        return answer
    finally:
        writer.close()


async def test_bytes_kept_per_provider_per_day_are_bounded_across_concurrent_pushes(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    body = message(games.unit_codes[games.units[0]]).encode()
    async with door(database_url, servers, provider_day_max_bytes=3 * len(body) + 10) as (_, http):
        answers = await asyncio.gather(
            *(http.post(PATH, content=body, headers=KEY) for _ in range(8))
        )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 200, 200, 429, 429, 429, 429, 429]
    full = next(a for a in answers if a.status_code == 429)
    assert 1 <= int(full.headers["Retry-After"]) <= 86_400
    assert "nothing from this message was kept" in full.json()["error"]
    assert "midnight UTC" in full.json()["error"]
    assert await kept(db) == 3
    assert await db.fetchval(
        "SELECT kept_day_bytes FROM provider WHERE code = 'odf-fbl'"
    ) == 3 * len(body)


# -- what it may send --------------------------------------------------------------------------


def _utf16_with_dtd(unit_code: str, dtd: str, replace: tuple[str, str]) -> bytes:
    text = message(unit_code).split("?>", 1)[1].replace(*replace)
    document = f'<?xml version="1.0" encoding="UTF-16"?>\n<!DOCTYPE OdfBody [\n{dtd}\n]>{text}'
    return document.encode("utf-16")


LAUGHS = '<!ENTITY lol0 "lol">\n' + "\n".join(
    f'<!ENTITY lol{n} "{("&lol" + str(n - 1) + ";") * 10}">' for n in range(1, 10)
)


@pytest.mark.parametrize(
    ("dtd", "replace"),
    [
        # Its entities would become a real goal.
        ('<!ENTITY goal "GOAL">', ('Action="GOAL"', 'Action="&goal;"')),
        # A billion laughs: 10^9 "lol"s in one attribute.
        (LAUGHS, ('Period="H1" Minute="12"', 'Period="&lol9;" Minute="12"')),
    ],
    ids=["entity-as-action", "billion-laughs"],
)
async def test_a_utf16_document_with_a_dtd_is_refused_and_nothing_expands(
    db: asyncpg.Connection, database_url: str, servers: Servers, dtd: str, replace: tuple[str, str]
) -> None:
    games = await make_games(db, units=1)
    body = _utf16_with_dtd(games.unit_codes[games.units[0]], dtd, replace)
    assert b"<!DOCTYPE" not in body  # what the old byte search looked for
    async with door(database_url, servers) as (_, http):
        answer = await http.post(PATH, content=body, headers=KEY)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("the message has a DOCTYPE (a DTD)")
    assert await actions(db) == 0
    row = await db.fetchrow("SELECT body, outcome, reason FROM provider_message")
    assert (bytes(row["body"]), row["outcome"]) == (body, "refused")
    assert "lol" not in row["reason"]


async def test_a_utf8_document_with_external_entities_is_refused_and_nothing_is_fetched(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    fetched: list[str] = []

    async def serve(request: web.Request) -> web.Response:
        fetched.append(request.path)
        return web.Response(text='<!ENTITY goal "GOAL">')

    app = web.Application()
    app.router.add_get("/{name}", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    text = message(games.unit_codes[games.units[0]]).split("?>", 1)[1]
    bodies = [
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE OdfBody [\n'
        '<!ENTITY secret SYSTEM "file:///etc/passwd">\n]>'
        + text.replace('Bib="9"', 'Bib="&secret;"'),
        f'<?xml version="1.0"?>\n<!DOCTYPE OdfBody SYSTEM "{base}/evil.dtd">'
        + text.replace('Action="GOAL"', 'Action="&goal;"'),
        f'<?xml version="1.0"?>\n<!DOCTYPE OdfBody [<!ENTITY % p SYSTEM "{base}/p.dtd"> %p;]>'
        + text,
    ]
    try:
        async with door(database_url, servers) as (_, http):
            answers = [await http.post(PATH, content=b, headers=KEY) for b in bodies]
    finally:
        await runner.cleanup()
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert all(a.json()["error"].startswith("the message has a DOCTYPE") for a in answers)
    assert fetched == []
    assert await actions(db) == 0
    assert not await db.fetchval("SELECT bool_or(reason LIKE '%root:%') FROM provider_message")


@pytest.mark.parametrize(
    ("headers", "change", "status", "error"),
    [
        ([(b"X-Api-Key", b"\xff\xfekey")], None, 401, "this is not the key of a provider"),
        (
            [(b"X-Api-Key", b"test-odf-key"), (b"Content-Type", b"text/\xffxml")],
            None,
            400,
            "the Content-Type header is not plain text",
        ),
        (None, ('Code="KOR" Order="1"', 'Code="KOR" Order="99999999999"'), 400, "Action Id 2"),
        (None, ('Code="KOR" Order="1"', 'Code="KOR" Order="\u00b2"'), 400, "Action Id 2"),
        (None, ('Id="3"', 'Id="' + "3" * 5000 + '"'), 400, "an <Action> has the Id"),
        (
            None,
            ('DocumentCode="{unit_code}"', 'DocumentCode="{unit_code}&#10;"'),
            400,
            "DocumentCode",
        ),
        (
            None,
            ('encoding="UTF-8"', 'encoding="Shift_JIS"'),
            400,
            "the message's encoding cannot be read",
        ),
    ],
    ids=[
        "key-not-utf8",
        "content-type-not-utf8",
        "order-huge",
        "order-superscript",
        "id-long",
        "code-newline",
        "encoding-multibyte",
    ],
)
async def test_crafted_headers_and_values_answer_plainly_never_500(
    db: asyncpg.Connection,
    database_url: str,
    servers: Servers,
    headers: list[tuple[bytes, bytes]] | None,
    change: tuple[str, str] | None,
    status: int,
    error: str,
) -> None:
    games = await make_games(db, units=1)
    template = SAMPLE.read_text()
    body = message(games.unit_codes[games.units[0]], template.replace(*change) if change else None)
    async with door(database_url, servers) as (_, http):
        answer = await http.post(PATH, content=body.encode(), headers=headers or list(KEY.items()))
    assert answer.status_code == status, answer.text
    assert error in answer.json()["error"]
    assert await actions(db) == 0


async def test_while_redis_is_down_each_worker_limits_on_its_own() -> None:
    # Nothing listens on port 1: every call fails at once, as with Redis down.
    down = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    limits = DoorLimits(Settings.from_env({}), down)
    try:
        waits = [await limits.wait("provider:odf-fbl", 0.01, 2) for _ in range(3)]
    finally:
        await down.aclose()
    assert waits[:2] == [None, None]
    assert waits[2] is not None and waits[2] > 1
    with pytest.raises(SettingsError, match="OMNIUM_PROVIDER_BURST"):
        Settings.from_env({}, provider_burst=0)
