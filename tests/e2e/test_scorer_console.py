"""The scorer console in headless Chromium: it scores offline, survives a reload, syncs once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest
from playwright.async_api import BrowserContext, Page, async_playwright, expect

from tests.support.games import make_games
from tests.support.scoring import ConsoleSite, running_console

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def phone(site: ConsoleSite, unit: str) -> AsyncIterator[tuple[BrowserContext, Page]]:
    """Headless Chromium on a phone-sized screen, mina signed in, the match open."""
    await site.accounts.create("mina", "Mina Park", "scorer", "a long password")
    await site.assign("mina", [unit])
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
        )
        try:
            context = await browser.new_context(
                viewport={"width": 390, "height": 844}, has_touch=True
            )
            page = await context.new_page()
            await page.goto(f"{site.url}/score/")
            await page.fill('input[name="login"]', "mina")
            await page.fill('input[name="password"]', "a long password")
            await page.click('#sign-in-form button[type="submit"]')
            await page.click(f'a[data-unit="{unit}"]')
            yield context, page
        finally:
            await browser.close()


async def go_offline(site: ConsoleSite, context: BrowserContext) -> None:
    """The venue's Wi-Fi goes: the network for real, and the browser told so (navigator.onLine)."""
    site.wifi.cut()
    await context.set_offline(True)


async def go_online(site: ConsoleSite, context: BrowserContext) -> None:
    site.wifi.restore()
    await context.set_offline(False)


# Football's [console]: a goal's details are asked on the tap (Save keeps the clock's minute),
# and a match event is asked about once.
ASKED = {"goal", "own_goal"}
CONFIRMED = {"end_period", "end_match"}


async def tap(page: Page, action: str, side: int | None = None) -> None:
    selector = f'#buttons button[data-action="{action}"]'
    if side is not None:
        selector += f'[data-side="{side}"]'
    await page.click(selector)
    if action in ASKED:
        await page.click('#details button[type="submit"]')
    elif action in CONFIRMED:
        await page.click('#confirm button[type="submit"]')


async def test_scoring_goes_on_offline_and_every_action_is_saved_once_in_order(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_console(database_url) as site, phone(site, unit) as (context, page):
        await tap(page, "start_period")
        await tap(page, "goal", 1)
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "0")
        await expect(page.locator("#score-1")).to_have_text("1")
        # The browser here keeps no data for sure: the page says so (D10).
        await expect(page.locator("#storage-warning")).to_be_visible()
        await page.wait_for_function("navigator.serviceWorker.controller !== null")

        await go_offline(site, context)
        for side in (1, 1, 2, 1, 2, 2, 1):
            await tap(page, "goal", side)
        await expect(page.locator("#score-1")).to_have_text("5")  # shown at once
        await tap(page, "end_period")
        await tap(page, "start_period")
        await tap(page, "goal", 2)
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "10")
        await expect(page.locator("#score-2")).to_have_text("4")
        await expect(page.locator("#net")).to_have_attribute("data-online", "false")

        await page.reload()
        await expect(page.locator("body")).to_have_attribute("data-ready", "true")
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "10")
        await expect(page.locator("#score-1")).to_have_text("5")
        await expect(page.locator("#score-2")).to_have_text("4")
        assert await db.fetchval("SELECT count(*) FROM match_action") == 2

        await go_online(site, context)
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "0", timeout=20_000)
        await expect(page.locator("#status")).to_contain_text("action 12")

        # A tap the rules refuse: the console says so at once, the server with its reason.
        await go_offline(site, context)
        await tap(page, "end_match")
        await expect(page.locator("#log li.waiting-item").first).to_contain_text(
            "will be refused: period 2 is still running: end it first"
        )
        await go_online(site, context)
        await expect(page.locator("#refused")).to_contain_text(
            "Not saved: End match — period 2 is still running: end it first"
        )
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "0")
    rows = await db.fetch("SELECT seq, command_id, kind, side FROM match_action ORDER BY seq")
    assert [r["seq"] for r in rows] == list(range(1, 13))
    assert len({r["command_id"] for r in rows}) == 12
    counters = [int(r["command_id"].rsplit(":", 1)[1]) for r in rows]
    assert counters == sorted(counters), "saved in the order they were tapped"
    assert [(r["kind"], r["side"]) for r in rows[2:]] == [
        ("goal", 1), ("goal", 1), ("goal", 2), ("goal", 1), ("goal", 2), ("goal", 2),
        ("goal", 1), ("end_period", None), ("start_period", None), ("goal", 2),
    ]  # fmt: skip
    scores = await db.fetch(
        "SELECT score FROM unit_competitor WHERE unit_id = $1 ORDER BY sort_order", unit
    )
    assert [s["score"] for s in scores] == ["5", "4"]


async def test_an_undo_tapped_offline_shows_at_once_and_the_server_agrees(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_console(database_url) as site, phone(site, unit) as (context, page):
        await tap(page, "start_period")
        for side in (1, 1, 2):
            await tap(page, "goal", side)
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "0")
        await expect(page.locator("#status")).to_contain_text("action 4")
        # The console has read the standing actions of this seq (the read after the sync).
        await expect(page.locator("#undo")).to_have_attribute("data-predicted", "true")

        await go_offline(site, context)
        await page.click("#undo")  # takes back the saved goal of side 2
        await expect(page.locator("#score-2")).to_have_text("0")
        await expect(page.locator("#log li.waiting-item").first).to_contain_text(
            "takes back Goal · JPN football"
        )
        await page.click("#undo")  # and the second goal of side 1
        await expect(page.locator("#score-1")).to_have_text("1")
        await tap(page, "goal", 2)
        await expect(page.locator("#score-2")).to_have_text("1")
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "3")
        assert await db.fetchval("SELECT count(*) FROM match_action") == 4

        await go_online(site, context)
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "0", timeout=20_000)
        await expect(page.locator("#status")).to_contain_text("action 7")
        await expect(page.locator("#score-1")).to_have_text("1")
        await expect(page.locator("#score-2")).to_have_text("1")
    rows = await db.fetch("SELECT seq, kind, side, undone_by FROM match_action ORDER BY seq")
    assert [(r["kind"], r["side"], r["undone_by"]) for r in rows] == [
        ("start_period", None, None), ("goal", 1, None), ("goal", 1, 6), ("goal", 2, 5),
        ("undo", None, None), ("undo", None, None), ("goal", 2, None),
    ]  # fmt: skip
    scores = await db.fetch(
        "SELECT score FROM unit_competitor WHERE unit_id = $1 ORDER BY sort_order", unit
    )
    assert [s["score"] for s in scores] == ["1", "1"]


# How long an idle tab is watched: the loop this guards against asked 400 times a second.
IDLE_SECONDS = 3.0


async def test_an_idle_signed_out_tab_asks_the_gateway_at_most_once(
    db: asyncpg.Connection, database_url: str
) -> None:
    """The sign-in screen waits for the person: it asks once whether this browser is already
    signed in, and after "Sign out" it asks nothing, however long the tab stays open."""
    await make_games(db, units=1)
    async with running_console(database_url) as site, async_playwright() as p:
        await site.accounts.create("mina", "Mina Park", "scorer", "a long password")
        browser = await p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
        )
        try:
            context = await browser.new_context(
                viewport={"width": 390, "height": 844}, has_touch=True
            )
            asked: list[str] = []
            # Every request the tab makes to the gateway's API, the service worker's included.
            context.on(
                "request",
                lambda r: asked.append(f"{r.method} {r.url}") if "/score/api/" in r.url else None,
            )
            page = await context.new_page()
            await page.goto(f"{site.url}/score/")
            await expect(page.locator("body")).to_have_attribute("data-ready", "true")
            await expect(page.locator("#sign-in")).to_be_visible()
            await asyncio.sleep(IDLE_SECONDS)
            print(f"\nidle signed-out tab, {IDLE_SECONDS} s: {len(asked)} requests: {asked[:5]}")
            assert len(asked) <= 1, asked[:10]

            await page.fill('input[name="login"]', "mina")
            await page.fill('input[name="password"]', "a long password")
            await page.click('#sign-in-form button[type="submit"]')
            await expect(page.locator("#pick")).to_be_visible()
            asked.clear()
            await page.click("#sign-out")
            await expect(page.locator("#sign-in")).to_be_visible()
            await asyncio.sleep(IDLE_SECONDS)
            after = [a for a in asked if not a.startswith("POST") or "sign-out" not in a]
            print(f"after Sign out, {IDLE_SECONDS} s: {len(after)} requests: {after[:5]}")
            assert len(after) <= 1, after[:10]
        finally:
            await browser.close()
