"""The scorer console's scoring screen as a scorer meets it on a phone: saved ✓ in
view, the period and clock, team names, a goal's details in one tap, match events apart and
asked once, a storage warning that can be hidden, and a phone on its side."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest
from playwright.async_api import BrowserContext, Page, async_playwright, expect

from tests.conftest import REPO
from tests.support.games import make_games
from tests.support.scoring import ConsoleSite, running_console

pytestmark = pytest.mark.e2e

SHOTS = REPO / "artifacts" / "screenshots"
PHONE = {"width": 390, "height": 844}
PHONE_ON_ITS_SIDE = {"width": 844, "height": 390}
SMALLEST_TARGET = 44  # CSS px


@asynccontextmanager
async def phone(
    site: ConsoleSite, unit: str, viewport: dict[str, int] = PHONE
) -> AsyncIterator[tuple[BrowserContext, Page]]:
    """Headless Chromium on a touch phone, mina signed in, the match open."""
    await site.accounts.create("mina", "Mina Park", "scorer", "a long password")
    await site.assign("mina", [unit])
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
        )
        try:
            context = await browser.new_context(viewport=viewport, has_touch=True, is_mobile=True)
            page = await context.new_page()
            await page.goto(f"{site.url}/score/")
            await page.fill('input[name="login"]', "mina")
            await page.fill('input[name="password"]', "a long password")
            await page.tap('#sign-in-form button[type="submit"]')
            await page.tap(f'a[data-unit="{unit}"]')
            await expect(page.locator("#buttons button").first).to_be_visible()
            yield context, page
        finally:
            await browser.close()


def button(action: str, side: int | None = None) -> str:
    selector = f'#buttons button[data-action="{action}"]'
    return selector + (f'[data-side="{side}"]' if side else "")


async def shot(page: Page, name: str) -> None:
    """What the phone shows, without scrolling (the fold is the point)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"scorer-{name}.png"))


async def box_in_view(page: Page, selector: str) -> dict[str, Any]:
    """Where the element is drawn with the page scrolled to the top, and whether all of it is
    on the screen and not under the sticky header or anything else."""
    got: dict[str, Any] = await page.evaluate(
        """(selector) => {
          window.scrollTo(0, 0);
          const el = document.querySelector(selector);
          const box = el.getBoundingClientRect();
          const header = document.querySelector("header").getBoundingClientRect().bottom;
          const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
          return { top: box.top, bottom: box.bottom, width: box.width, height: box.height,
            header, screen: window.innerHeight,
            inView: box.top >= header && box.bottom <= window.innerHeight && box.height > 0,
            hit: !!hit && (el === hit || el.contains(hit)) };
        }""",
        selector,
    )
    return got


async def test_each_tap_says_saved_above_the_fold_on_a_phone(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    async with running_console(database_url) as site, phone(site, games.units[0]) as (ctx, page):
        receipt = page.locator("#receipt")
        await page.tap(button("start_period"))
        await expect(receipt).to_have_text("Start period — saved ✓")
        await expect(receipt).to_have_attribute("data-state", "saved")
        where = await box_in_view(page, "#receipt")
        assert where["inView"] and where["hit"], where
        await shot(page, "phone-saved")

        # Offline the same line says the tap is kept here, and never "saved".
        site.wifi.cut()
        await ctx.set_offline(True)
        await page.tap(button("goal", 1))
        await page.tap('#details button[type="submit"]')
        await expect(receipt).to_have_attribute("data-state", "kept")
        await expect(receipt).to_contain_text("kept on this device, not saved yet")
        await expect(receipt).not_to_contain_text("saved ✓")
        await shot(page, "phone-kept-offline")
        site.wifi.restore()
        await ctx.set_offline(False)
        saved = "Goal · KOR football (minute 1) — saved ✓"
        await expect(receipt).to_have_text(saved, timeout=20_000)
        await expect(page.locator("#log li").first).to_contain_text("saved ✓ by Mina Park")


async def test_the_screen_shows_the_period_the_clock_and_the_teams(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    async with running_console(database_url) as site, phone(site, games.units[0]) as (_, page):
        await expect(page.locator("#period")).to_have_text("Before kick-off")
        await expect(page.locator("#clock")).to_have_text("00:00 · clock stopped")
        await page.tap(button("start_period"))
        await expect(page.locator("#period")).to_have_text("Period 1")
        await expect(page.locator("#clock")).to_have_text(re.compile(r"^\d\d:\d\d$"))
        await expect(page.locator(button("goal", 1))).to_contain_text("KOR")
        await expect(page.locator(button("goal", 2))).to_contain_text("JPN")
        await page.tap(button("goal", 2))
        await page.tap('#details button[type="submit"]')
        await expect(page.locator("#log li").first).to_contain_text("Goal · JPN football")
        await expect(page.locator("#log")).not_to_contain_text("side 2")
        await page.tap(button("end_period"))
        await page.tap('#confirm button[type="submit"]')
        await expect(page.locator("#clock")).to_contain_text("clock stopped")
        await expect(page.locator("#period")).to_have_text("Period 1")
        await shot(page, "phone-period-clock-teams")


async def test_a_goal_asks_its_scorer_and_minute_in_one_tap(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_console(database_url) as site, phone(site, unit) as (_, page):
        await page.tap(button("start_period"))
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "0")
        assert not await page.locator("#ask").is_checked()
        await page.tap(button("goal", 2))  # one tap: the details are asked at once
        sheet = page.locator("#details")
        await expect(sheet).to_be_visible()
        await expect(sheet.locator("strong")).to_have_text("Goal · JPN football")
        shirt, minute = sheet.locator('input[name="player"]'), sheet.locator('input[name="minute"]')
        await expect(shirt).to_have_attribute("inputmode", "numeric")
        await expect(minute).to_have_attribute("inputmode", "numeric")
        await expect(minute).to_have_value("1")  # from the clock: the first minute
        await shot(page, "phone-goal-details")
        save = await sheet.locator('button[type="submit"]').bounding_box()
        cancel = await sheet.locator("button.cancel").bounding_box()
        assert save and cancel
        for one in (save, cancel):
            assert one["width"] >= SMALLEST_TARGET and one["height"] >= SMALLEST_TARGET, one
            assert one["y"] + one["height"] <= PHONE["height"], "on the screen"
        apart = save["x"] - (cancel["x"] + cancel["width"])
        assert apart >= 16, f"Save and Cancel are {apart} px apart"

        await sheet.locator("button.cancel").tap()  # Cancel keeps nothing
        await expect(sheet).to_be_hidden()
        await page.tap(button("goal", 2))
        await shirt.fill("9")
        await sheet.locator('button[type="submit"]').tap()
        await expect(page.locator("#receipt")).to_have_text(
            "Goal · JPN football (player 9, minute 1) — saved ✓"
        )
    rows = await db.fetch("SELECT kind, side, fields FROM match_action ORDER BY seq")
    assert [(r["kind"], r["side"], dict(r["fields"])) for r in rows] == [
        ("start_period", None, {}),
        ("goal", 2, {"player": "9", "minute": 1}),
    ]


async def test_match_events_look_apart_and_are_asked_once(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    async with running_console(database_url) as site, phone(site, games.units[0]) as (_, page):
        looks = await page.evaluate(
            """(names) => names.map((n) => {
              const b = document.querySelector(`#buttons button[data-action="${n}"]`);
              const s = getComputedStyle(b);
              return { row: b.parentElement.className, colour: s.color,
                border: `${s.borderTopWidth} ${s.borderTopColor}`, fill: s.backgroundColor };
            })""",
            ["goal", "end_period", "end_match"],
        )
        goal, end_period, end_match = looks
        for event in (end_period, end_match):
            assert event["row"] != goal["row"], "a row of their own"
            assert (event["colour"], event["border"]) != (goal["colour"], goal["border"]), looks
        await page.tap(button("start_period"))
        await expect(page.locator("#receipt")).to_have_attribute("data-state", "saved")

        await page.tap(button("end_period"))
        confirm = page.locator("#confirm")
        await expect(confirm).to_be_visible()
        await expect(confirm.locator("strong")).to_have_text("End period?")
        await expect(confirm).to_contain_text("Period 1")
        await shot(page, "phone-confirm-end-period")
        await confirm.get_by_role("button", name="Not yet").tap()
        await expect(confirm).to_be_hidden()
        await expect(page.locator("#waiting")).to_have_attribute("data-count", "0")
        await page.tap(button("end_period"))
        await confirm.get_by_role("button", name="End period").tap()
        await expect(page.locator("#receipt")).to_have_text("End period — saved ✓")
    kinds = [r["kind"] for r in await db.fetch("SELECT kind FROM match_action ORDER BY seq")]
    assert kinds == ["start_period", "end_period"]


async def test_the_storage_warning_is_one_line_and_stays_hidden_when_asked(
    db: asyncpg.Connection, database_url: str
) -> None:
    """A new Chromium context keeps no data for sure: the warning shows (D10), compactly."""
    games = await make_games(db, units=1)
    async with running_console(database_url) as site, phone(site, games.units[0]) as (_, page):
        warning = page.locator("#storage-warning")
        await expect(warning).to_be_visible()
        sizes = await page.evaluate(
            """() => ({ header: document.querySelector("header").offsetHeight,
                       warning: document.getElementById("storage-warning").offsetHeight })"""
        )
        assert sizes["header"] <= 56 and sizes["warning"] <= 60, sizes
        for side in (1, 2):
            where = await box_in_view(page, f"#board .side:nth-child({side}) .name")
            assert where["inView"] and where["hit"], where
        await shot(page, "phone-warning-compact")

        await page.tap("#storage-hide")
        await expect(warning).to_be_hidden()
        await expect(page.locator("#storage-chip")).to_be_visible()
        await page.reload()
        await expect(page.locator("body")).to_have_attribute("data-ready", "true")
        await expect(page.locator("#storage-chip")).to_be_visible()
        await expect(warning).to_be_hidden()  # remembered on the device
        await shot(page, "phone-warning-hidden")
        await page.tap("#storage-chip")
        await expect(warning).to_be_visible()


async def test_a_phone_on_its_side_shows_every_scoring_button(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with (
        running_console(database_url) as site,
        phone(site, unit, PHONE_ON_ITS_SIDE) as (_, page),
    ):
        names = await page.evaluate(
            """() => [...document.querySelectorAll("#buttons button")].map(
                 (b) => `${b.dataset.action} ${b.dataset.side || ""}`.trim())"""
        )
        assert len(names) == 13, names  # five actions for each side, three match events
        for name in names:
            action, _, side = name.partition(" ")
            where = await box_in_view(page, button(action, int(side) if side else None))
            assert where["inView"] and where["hit"], (name, where)
            assert where["height"] >= SMALLEST_TARGET, (name, where)
        await page.tap(button("start_period"))
        await expect(page.locator("#receipt")).to_have_text("Start period — saved ✓")
        assert await page.evaluate("window.scrollY") == 0
        await shot(page, "phone-landscape-844x390")
