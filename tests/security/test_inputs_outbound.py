"""Outbound calls: only to addresses an operator allows, answers read to a limit, and no secret
URL in a log line, a stored error or a trace.

Everything runs against real parts: the delivery and imports services, the Scout simulator, and
HTTP receivers on loopback (127.0.0.1 allowed; 127.0.0.2, also this machine, stands for an address
no operator allowed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from omnium_delivery import ClientSettingsError, load_clients
from omnium_imports._scout import ScoutClient, ScoutError, ScoutRun
from omnium_settings import Settings, SettingsError
from omnium_telemetry import setup_tracing, shutdown_tracing
from tests.support.command import settings_for
from tests.support.delivery import running_delivery, sends
from tests.support.games import EVENT, make_games
from tests.support.imports import games_day
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
ONLY_127_0_0_1 = ("127.0.0.1/32",)
SETTING = "OMNIUM_OUTBOUND_ALLOWED_NETWORKS"

# -- real HTTP servers of our own ------------------------------------------------------------------


@dataclass(slots=True)
class Server:
    url: str
    paths: list[str] = field(default_factory=list)  # every request's raw path, in order


@asynccontextmanager
async def http_server(
    answer: Callable[[web.Request], Awaitable[web.StreamResponse]], host: str = "127.0.0.1"
) -> AsyncIterator[Server]:
    """A real aiohttp server on `host` that records each request's raw path and answers it."""
    server = Server("")

    async def handle(request: web.Request) -> web.StreamResponse:
        server.paths.append(request.raw_path)
        return await answer(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    server.url = f"http://{host}:{runner.addresses[0][1]}"
    try:
        yield server
    finally:
        await runner.cleanup()


async def ok(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(text="ok")


def hook_client(code: str, url: str, feeds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "code": code,
        "event": EVENT,
        "transport": "webhook",
        "webhook": {"url": url, "secret": "whsec_" + "a2FrYWthOmthOmthOmthOmthOmth"},
        "feeds": feeds or [{"kind": "schedule", "format": "json"}],
    }


async def first_record(db: asyncpg.Connection, code: str) -> asyncpg.Record:
    (record, *_) = await eventually(lambda: sends(db, code), what=f"{code}'s first send")
    return record


# -- Outbound calls: allowed addresses only, answers to a limit ------------------------------------


async def test_saving_a_webhook_to_cloud_metadata_or_a_private_address_is_refused(
    db: asyncpg.Connection, database_url: str
) -> None:
    await make_games(db, units=1)
    settings = settings_for(database_url, outbound_allowed_networks=ONLY_127_0_0_1)
    for url, words in (
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.7/hook", "private"),
        ("http://[::1]:9/hook", "loopback"),
        ("http://127.0.0.2:9/hook", "loopback"),
    ):
        with pytest.raises(ClientSettingsError) as refused:
            await load_clients(db, [hook_client("meta", url)], settings)
        assert words in str(refused.value) and SETTING in str(refused.value)
    # The allowed range is taken.
    await load_clients(db, [hook_client("meta", "http://127.0.0.1:9/hook")], settings)
    assert await db.fetchval("SELECT count(*) FROM client") == 1


async def test_a_webhook_to_an_address_not_allowed_is_never_called(
    db: asyncpg.Connection, database_url: str
) -> None:
    """Saved before the rule (or by code that skips the check): the send is refused where it
    connects, with a reason an operator can act on, and the receiver sees nothing."""
    await make_games(db, units=1)
    async with http_server(ok, host="127.0.0.2") as elsewhere:
        await load_clients(db, [hook_client("inside", f"{elsewhere.url}/hook")])
        async with running_delivery(database_url, outbound_allowed_networks=ONLY_127_0_0_1):
            record = await first_record(db, "inside")
    assert elsewhere.paths == []
    assert record["outcome"] == "refused" and record["attempts"] == 1
    assert "127.0.0.2 is a loopback address" in record["error"] and SETTING in record["error"]


async def test_a_name_is_checked_by_the_address_it_resolves_to_when_connecting(
    db: asyncpg.Connection, database_url: str
) -> None:
    """`localhost` is only a name in the URL: what counts is where it resolves at the connect."""
    await make_games(db, units=1)
    async with http_server(ok) as receiver:
        port = receiver.url.rsplit(":", 1)[1]
        await load_clients(db, [hook_client("named", f"http://localhost:{port}/hook")])
        async with running_delivery(database_url, outbound_allowed_networks=("127.0.0.2/32",)):
            record = await first_record(db, "named")
    assert receiver.paths == []
    assert record["outcome"] == "refused" and "localhost was not called" in record["error"]


async def test_a_redirect_to_an_address_not_allowed_is_not_followed(
    db: asyncpg.Connection, database_url: str
) -> None:
    await make_games(db, units=1)
    async with http_server(ok, host="127.0.0.2") as inside:

        async def moved(request: web.Request) -> web.Response:
            await request.read()
            raise web.HTTPTemporaryRedirect(f"{inside.url}/hook")

        async with http_server(moved) as receiver:
            await load_clients(db, [hook_client("moved", f"{receiver.url}/hook")])
            async with running_delivery(database_url, outbound_allowed_networks=ONLY_127_0_0_1):
                record = await first_record(db, "moved")
    assert inside.paths == [] and receiver.paths == ["/hook"]
    assert record["outcome"] == "refused" and "answered 307" in record["error"]


async def test_a_webhook_answer_past_the_limit_fails_the_send(
    db: asyncpg.Connection, database_url: str
) -> None:
    await make_games(db, units=1)

    async def huge(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = web.StreamResponse()  # chunked: no Content-Length to go by
        await answer.prepare(request)
        for _ in range(64):
            await answer.write(b"x" * 16_384)
        await answer.write_eof()
        return answer

    async with http_server(huge) as receiver:
        await load_clients(db, [hook_client("big", f"{receiver.url}/hook")])
        async with running_delivery(database_url, outbound_answer_max_bytes=65_536):
            record = await first_record(db, "big")
    assert record["outcome"] == "refused"
    assert "answered with more than 65,536 bytes" in record["error"]


async def test_scout_on_an_address_not_allowed_is_never_read(database_url: str) -> None:
    """The Scout simulator listens on 127.0.0.1; this imports process may reach 127.0.0.2 only.
    The doorbell's run goes on record as failed, saying why and which setting allows it."""
    allowed = {"outbound_allowed_networks": ("127.0.0.2/32",)}
    async with games_day(database_url, import_overrides=allowed) as day:
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(run.id)
        units = await day.db.fetchval("SELECT count(*) FROM unit")
    assert ours["status"] == "failed"
    assert "127.0.0.1 is a loopback address" in ours["reason"] and SETTING in ours["reason"]
    assert units == 0


async def test_saving_an_integration_whose_scout_is_private_is_refused(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    await make_games(db, units=0)
    example = json.loads((REPO / "services/imports/examples/integration.json").read_text())
    (tmp_path / "integration.json").write_text(
        json.dumps(example | {"scout_url": "http://169.254.169.254:8090"}, indent=1)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIUM_")}
    env |= {"OMNIUM_DATABASE_URL": database_url}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "omnium_imports", "integration", "add", "integration.json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "scout_url" in done.stderr and "169.254.169.254 is a link-local address" in done.stderr
    assert SETTING in done.stderr and "Nothing was written." in done.stderr
    assert await db.fetchval("SELECT count(*) FROM integration") == 0


async def test_a_scout_page_past_its_size_bound_is_not_read_whole(database_url: str) -> None:
    """A page holds at most scout_page_size rows of scout_row_max_bytes: two rows of 600 kB
    are past it, and the run is not read (nothing from it could be written)."""
    rows = [{"externalId": f"SC-{n}", "name": "x" * 600_000} for n in range(2)]

    async def scout(request: web.Request) -> web.Response:
        return web.json_response({"items": rows})

    settings = settings_for(database_url, scout_page_size=10, scout_row_max_bytes=16_384)
    async with http_server(scout) as server:
        client = ScoutClient(settings)
        try:
            run = ScoutRun("r-1", "schedule", "passed", None, 2, None, "all", None)
            with pytest.raises(ScoutError) as refused:
                await client.pages(server.url, run)
        finally:
            await client.close()
    assert "more than 163,840 bytes" in str(refused.value)
    assert "Nothing from this run was written." in str(refused.value)


async def refuse(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(status=403)


async def _alert_for_a_refused_send(
    db: asyncpg.Connection,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
    alert_url: str,
    logged: str,
    **settings: Any,
) -> None:
    """A client's receiver refuses its file, so delivery raises an alert and POSTs it to
    `alert_url`; returns once `logged` is in the log."""
    await make_games(db, units=1)
    async with http_server(refuse) as receiver:
        await load_clients(db, [hook_client("refusing", f"{receiver.url}/hook")])
        # As every omnium process sets it (test_httpx_does_not_log_each_request_at_info).
        caplog.set_level(logging.WARNING, logger="httpx")
        with caplog.at_level(logging.DEBUG):
            async with running_delivery(database_url, alert_webhook_url=alert_url, **settings):
                await eventually(lambda: _in(logged, caplog), what=logged)


async def _in(text: str, caplog: pytest.LogCaptureFixture) -> bool:
    return text in caplog.text


async def test_the_alert_webhook_is_not_called_on_an_address_not_allowed(
    db: asyncpg.Connection, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with http_server(ok, host="127.0.0.2") as on_duty:
        await _alert_for_a_refused_send(
            db,
            database_url,
            caplog,
            f"{on_duty.url}/alert",
            "127.0.0.2 is a loopback address",
            outbound_allowed_networks=ONLY_127_0_0_1,
        )
    assert on_duty.paths == []
    assert await db.fetchval("SELECT count(*) FROM delivery_alert WHERE sent_at IS NULL") == 1


async def test_an_alert_webhook_answer_past_the_limit_counts_as_not_sent(
    db: asyncpg.Connection, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def huge(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"x" * 300_000)

    async with http_server(huge) as on_duty:
        await _alert_for_a_refused_send(
            db,
            database_url,
            caplog,
            f"{on_duty.url}/alert",
            "answered with more than 1,024 bytes",
            outbound_answer_max_bytes=1024,
        )
    assert on_duty.paths == ["/alert"]
    assert await db.fetchval("SELECT count(*) FROM delivery_alert WHERE sent_at IS NULL") == 1


# -- Secrets stay out of logs and stored errors ----------------------------------------------------


async def test_the_alert_webhook_url_is_not_written_to_the_log(
    db: asyncpg.Connection, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Whoever has the alert webhook's URL can post alerts: the log names its host only."""
    async with http_server(ok) as gone:
        closed = gone.url  # the server is gone once the block ends: nothing answers there
    secret_url = f"{closed}/services/T0/B0/s3cr3t-path?token=s3cr3t-query"
    await _alert_for_a_refused_send(
        db, database_url, caplog, secret_url, "could not be sent to the alert webhook at 127.0.0.1"
    )
    assert "s3cr3t" not in caplog.text


async def test_a_webhook_token_in_the_query_is_kept_out_of_stored_errors_and_logs(
    db: asyncpg.Connection, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await make_games(db, units=1)

    async with http_server(refuse) as receiver:
        url = f"{receiver.url}/hook?token=s3cr3t-query"
        await load_clients(db, [hook_client("tokened", url)])
        # As every omnium process sets it (test_httpx_does_not_log_each_request_at_info).
        caplog.set_level(logging.WARNING, logger="httpx")
        with caplog.at_level(logging.DEBUG):
            async with running_delivery(database_url):
                record = await first_record(db, "tokened")
            alert = await eventually(
                lambda: db.fetchval("SELECT message FROM delivery_alert"), what="the send alert"
            )
    assert record["outcome"] == "refused"
    assert record["error"] == f"{receiver.url}/hook?… answered 403"
    assert "s3cr3t" not in record["error"] and "s3cr3t" not in alert
    assert "s3cr3t" not in caplog.text


async def test_a_webhook_token_in_the_query_is_kept_out_of_traces(
    db: asyncpg.Connection, database_url: str
) -> None:
    """OpenTelemetry's httpx spans carry the URL: the collector must not get the token."""
    await make_games(db, units=1)
    spans = InMemorySpanExporter()
    setup_tracing("omnium-test", Settings.from_env({}), exporter=spans)
    try:
        async with http_server(ok) as receiver:
            url = f"{receiver.url}/hook?token=s3cr3t-query"
            await load_clients(db, [hook_client("traced", url)])
            async with running_delivery(database_url):
                record = await first_record(db, "traced")
    finally:
        shutdown_tracing()
    assert record["outcome"] == "delivered"
    posts = [
        s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT and s.name == "POST"
    ]
    assert posts, "the webhook's POST was traced"
    for span in posts:
        shown = dict(span.attributes or {})
        assert shown.get("url.full", shown.get("http.url")) == f"{receiver.url}/hook?…"
        assert "s3cr3t" not in json.dumps(shown, default=str)


def test_httpx_does_not_log_each_request_at_info() -> None:
    """httpx logs every request's full URL at INFO; a service's logging keeps it at WARNING.
    (A process of its own, so this run's logging is not the one looked at.)"""
    code = (
        "import logging\n"
        "from omnium_process import run_process\n"
        "async def main(settings):\n"
        "    print(logging.getLogger('httpx').getEffectiveLevel())\n"
        "run_process('probe', main, needs_database=False)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIUM_")}
    env |= {"OMNIUM_ENVIRONMENT": "development", "OMNIUM_LOG_LEVEL": "DEBUG"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) >= logging.WARNING


def test_settings_refuse_an_allowed_network_that_is_not_one() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"OMNIUM_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8,localhost"})
    assert "'localhost', which is not an address or a CIDR range" in str(refused.value)
