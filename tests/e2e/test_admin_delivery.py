"""The console's Delivery screen in headless Chromium against real command, delivery and admin
processes' code: a client that keeps the promise, one that cannot be reached (its reason shown),
and Resend."""

from __future__ import annotations

import re
import shutil
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Route, async_playwright, expect
from standardwebhooks.webhooks import Webhook

from omnium.command.v1 import command_pb2
from omnium_accounts import Accounts
from omnium_admin import AdminApp
from omnium_db import PoolRoad, create_pool
from omnium_delivery import load_clients
from tests.conftest import REPO
from tests.support.command import running_command, settings_for
from tests.support.delivery import first_send, running_delivery, sends
from tests.support.games import EVENT, make_games
from tests.support.receiver import Receiver, webhook_receiver
from tests.support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PASSWORD = "correct horse battery"


def _hook(code: str, name: str, url: str, secret: str) -> dict[str, Any]:
    return {
        "code": code,
        "name": name,
        "event": EVENT,
        "transport": "webhook",
        "webhook": {"url": url, "secret": secret},
        "feeds": [{"kind": "results", "format": "json"}],
    }


async def _delivered_change(db: asyncpg.Connection) -> bool:
    return bool(
        await db.fetchval(
            "SELECT count(*) FROM delivery_attempt a JOIN client c ON c.id = a.client_id "
            "WHERE c.code = 'dailyhunt' AND a.outcome = 'delivered' AND a.saved_at IS NOT NULL"
        )
    )


async def _failed(db: asyncpg.Connection) -> bool:
    return bool(
        await db.fetchval(
            "SELECT count(*) FROM delivery_attempt a JOIN client c ON c.id = a.client_id "
            "WHERE c.code = 'news18' AND a.outcome = 'failed' AND a.saved_at IS NOT NULL "
            "AND EXISTS (SELECT 1 FROM delivery_alert x WHERE x.client_id = c.id "
            "AND x.status = 'open')"
        )
    )


async def test_the_delivery_screen_shows_the_promise_a_failing_client_and_resends(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=1)
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))  # bound, never listening: news18 cannot be reached
        dead_url = f"http://127.0.0.1:{dead.getsockname()[1]}/hook"
        async with webhook_receiver() as receiver:
            await load_clients(
                db,
                [
                    _hook("dailyhunt", "DailyHunt", receiver.url, receiver.secret),
                    _hook("news18", "News18", dead_url, receiver.secret),
                ],
            )
            async with (
                running_command(database_url) as cmd,
                running_delivery(
                    database_url,
                    feed_debounce_seconds=0.05,
                    webhook_tries=2,
                    webhook_retry_base_seconds=0.05,
                    # news18 is tried again soon, so the change itself fails to reach it too.
                    delivery_retry_seconds=0.5,
                    # The screen is under test, not this machine's speed: a target no busy
                    # machine misses for dailyhunt (its share is checked by the alert test).
                    push_target_seconds=60.0,
                ) as delivery,
            ):
                await first_send(db, "dailyhunt")
                answer = await cmd.submit(
                    command_id="delivery-screen-1",
                    code="results.set_sides",
                    payload={"sides": [{"order": 1, "score": "2"}, {"order": 2, "score": "1"}]},
                    unit_id=games.units[0],
                )
                assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
                await eventually(lambda: _delivered_change(db), what="dailyhunt's send")
                await eventually(lambda: _failed(db), what="news18's failed change")

                settings = settings_for(
                    database_url,
                    command_address=f"127.0.0.1:{cmd.port}",
                    delivery_address=f"127.0.0.1:{delivery.app.grpc_port}",
                )
                pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="e2e", size=2)
                await Accounts(pool, settings).create("ana", "Ana Operator", "operator", PASSWORD)
                await pool.close()
                app = AdminApp(settings)
                await app.start(0)
                try:
                    await _browse(app.port, tmp_path, db, receiver)
                finally:
                    await app.stop()


async def _browse(port: int, shots: Path, db: asyncpg.Connection, receiver: Receiver) -> None:
    url = f"http://127.0.0.1:{port}"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)
            await page.goto(f"{url}/delivery")
            await page.get_by_label("Login").fill("ana")
            await page.get_by_label("Password").fill(PASSWORD)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.get_by_role("heading", name="Delivery", exact=True)).to_be_visible()
            await expect(page.get_by_role("link", name="Delivery")).to_have_attribute(
                "aria-current", "page"
            )

            good = page.locator('[data-client="dailyhunt"]')
            await expect(good.locator("[data-verdict]")).to_have_text(
                "Promise kept: 100% of 1 change arrived within 60.0 s of being saved."
            )
            await expect(good.locator("[data-share]")).to_contain_text("100%")
            await expect(good.locator("[data-share]")).to_contain_text("1 of 1 change within")
            await expect(good.locator("[data-delay]")).to_contain_text("half within")
            await expect(good.locator("[data-misses]")).to_contain_text(
                "0 (none: every change sent arrived in time)"
            )
            await expect(good.locator("[data-last]")).not_to_have_text("never")
            await expect(good.get_by_role("cell", name="results (JSON")).to_be_visible()
            await expect(good).to_have_class("card green")

            bad = page.locator('[data-client="news18"]')
            await expect(bad).to_have_class("card not-green")
            await expect(bad.locator("[data-verdict]")).to_contain_text("Promise broken: only")
            await expect(bad.locator("[data-misses]")).to_contain_text("or not at all")
            await expect(bad.locator("[data-reasons]")).to_contain_text("could not be reached")
            await expect(bad.locator("[data-last]")).to_have_text("never")
            await _shot(page, shots, "delivery")

            # Resend: every feed of the client goes again, even with the same bytes.
            sent = len(await sends(db, "dailyhunt"))
            await good.get_by_role("button", name="Resend").click()
            await expect(page.get_by_role("status")).to_have_text(
                "dailyhunt: 1 feed will be sent again, even where nothing changed."
            )
            resent = await eventually(lambda: _resent(db, sent), what="the resend recorded")
            assert resent["outcome"] == "delivered"
            await _shot(page, shots, "delivery-resent")

            # A new webhook secret, shown once; the old one still signs during the overlap,
            # and the Standard Webhooks reference library accepts the next webhook with either.
            await good.get_by_role("button", name="New webhook secret").click()
            shown = page.locator('[data-rotated="dailyhunt"]')
            await expect(shown).to_contain_text("it is not shown again")
            secret = await shown.locator("[data-secret]").inner_text()
            stored = await db.fetchval(
                "SELECT settings->'webhook' FROM client WHERE code = $1", "dailyhunt"
            )
            assert stored["secret"] == secret and stored["previous_secret"] == receiver.secret
            assert "said=" not in page.url and secret not in page.url
            sent = len(await sends(db, "dailyhunt"))
            await good.get_by_role("button", name="Resend").click()
            await eventually(lambda: _resent(db, sent), what="the resend after the rotation")
            got = receiver.got[-1]
            for key in (secret, receiver.secret):
                Webhook(key).verify(got.body, got.headers)
            await _shot(page, shots, "delivery-new-secret")
        finally:
            await browser.close()


async def test_a_client_with_nothing_to_measure_is_grey_and_the_screen_shows_loading(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    """A client that has had only its first whole file (no change sent, so nothing to measure)
    is a grey card; the screen's live part shows Loading…, then Failed to read with Try again,
    while the console cannot read /api/delivery."""
    games = await make_games(db, units=1)
    async with webhook_receiver() as receiver:
        await load_clients(db, [_hook("dailyhunt", "DailyHunt", receiver.url, receiver.secret)])
        async with (
            running_command(database_url) as cmd,
            running_delivery(
                database_url, feed_debounce_seconds=0.05, push_target_seconds=60.0
            ) as delivery,
        ):
            await first_send(db, "dailyhunt")
            settings = settings_for(
                database_url,
                delivery_address=f"127.0.0.1:{delivery.app.grpc_port}",
                admin_refresh_seconds=0.3,
            )
            pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="e2e", size=2)
            await Accounts(pool, settings).create("ana", "Ana Operator", "operator", PASSWORD)
            await pool.close()
            app = AdminApp(settings)
            await app.start(0)
            try:

                async def send_a_change() -> None:
                    answer = await cmd.submit(
                        command_id="delivery-quiet-1",
                        code="results.set_sides",
                        payload={"sides": [{"order": 1, "score": "1"}, {"order": 2, "score": "0"}]},
                        unit_id=games.units[0],
                    )
                    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason

                await _browse_quiet(app.port, tmp_path, send_a_change)
            finally:
                await app.stop()


async def _browse_quiet(
    port: int, shots: Path, send_a_change: Callable[[], Awaitable[None]]
) -> None:
    url = f"http://127.0.0.1:{port}"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)
            await page.goto(f"{url}/delivery")
            await page.get_by_label("Login").fill("ana")
            await page.get_by_label("Password").fill(PASSWORD)
            await page.get_by_role("button", name="Sign in").click()
            quiet = page.locator('[data-client="dailyhunt"]')
            await expect(quiet.locator("[data-verdict]")).to_have_text(
                re.compile(r"^Nothing to measure: no change was sent to this client in the last")
            )
            await expect(quiet).to_have_class("card not-green starting")
            await expect(quiet.locator("[data-share]")).to_contain_text("no change sent")
            await expect(quiet.locator("[data-misses]")).to_contain_text("none to count")
            await expect(quiet.locator("[data-last]")).to_contain_text("not counted above")
            # The card's edge is the grey of "nothing to say", neither green nor red.
            edge = await quiet.evaluate("(c) => getComputedStyle(c).borderLeftColor")
            assert edge not in ("rgb(179, 38, 30)", "rgb(27, 127, 58)"), edge
            await _shot(page, shots, "delivery-nothing-to-measure")

            held: list[Route] = []

            async def hold(route: Route) -> None:
                held.append(route)  # no answer yet: the screen waits, as on a slow network

            await page.route("**/api/delivery", hold)
            await page.reload()
            status = page.locator("[data-live-status]")
            await expect(status).to_contain_text("Loading…")
            await _shot(page, shots, "state-delivery-loading")
            for route in held:
                await route.abort("connectionrefused")
            await page.unroute("**/api/delivery")
            await page.route("**/api/delivery", lambda route: route.abort("connectionrefused"))
            await expect(status).to_contain_text("Failed to read")
            await expect(status.get_by_role("button", name="Try again")).to_be_visible()
            await _shot(page, shots, "state-delivery-failed")
            await page.unroute("**/api/delivery")
            await status.get_by_role("button", name="Try again").click()
            await expect(status).to_be_hidden()
            await expect(quiet.locator("[data-verdict]")).to_contain_text("Nothing to measure")

            # A change sent while the screen is open shows on it, without a reload.
            await page.evaluate("window.notReloaded = true")
            await send_a_change()
            await expect(quiet.locator("[data-verdict]")).to_contain_text("Promise kept")
            await expect(quiet).to_have_class("card green")
            await expect(quiet.locator("[data-share]")).to_contain_text("1 of 1 change")
            assert await page.evaluate("window.notReloaded === true")
        finally:
            await browser.close()


async def _resent(db: asyncpg.Connection, count: int) -> Any:
    rows = await sends(db, "dailyhunt")
    return rows[-1] if len(rows) > count and rows[-1]["resend"] else None


async def _shot(page: Any, shots: Path, name: str) -> None:
    path = shots / f"{name}.png"
    await page.wait_for_load_state("load")
    await page.screenshot(path=str(path), full_page=True)
    keep = REPO / "artifacts" / "screenshots"
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, keep / path.name)
