"""Scorers are assigned, in headless Chromium: the console lists only the scorer's
matches, and a match handed to another scorer refuses the first one's queued actions, with the
reason on their device."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest
from playwright.async_api import BrowserContext, Page, async_playwright, expect

from omnium_accounts import Assignments
from tests.support.games import make_games
from tests.support.scoring import ConsoleSite, running_console
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e
PASSWORD = "a long password"


@asynccontextmanager
async def phone(site: ConsoleSite, login: str) -> AsyncIterator[tuple[BrowserContext, Page]]:
    """Headless Chromium on a phone-sized screen, signed in as `login`, on the match list."""
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
            await page.fill('input[name="login"]', login)
            await page.fill('input[name="password"]', PASSWORD)
            await page.click('#sign-in-form button[type="submit"]')
            await expect(page.locator("#pick")).to_be_visible()
            yield context, page
        finally:
            await browser.close()


async def tap(page: Page, action: str, side: int | None = None) -> None:
    selector = f'#buttons button[data-action="{action}"]'
    if side is not None:
        selector += f'[data-side="{side}"]'
    await page.click(selector)
    if action == "goal":  # football asks a goal's details on the tap: Save as it is
        await page.click('#details button[type="submit"]')


async def test_the_console_lists_only_the_scorer_s_matches(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=3)
    async with running_console(database_url) as site:
        await site.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        await site.accounts.create("ben", "Ben Ode", "scorer", PASSWORD)
        await site.accounts.create("olga", "Olga Op", "operator", PASSWORD)
        await site.assign("mina", [games.units[0], games.units[2]])
        async with phone(site, "mina") as (_, page):
            links = page.locator("#matches a[data-unit]")
            await expect(links).to_have_count(2)
            assert [await a.get_attribute("data-unit") for a in await links.all()] == [
                games.units[0],
                games.units[2],
            ]
            await expect(links.nth(0)).to_contain_text("Match 1")
            await expect(links.nth(1)).to_contain_text("Match 3")
        async with phone(site, "ben") as (_, page):
            await expect(page.locator("#matches a[data-unit]")).to_have_count(0)
            await expect(page.locator("#matches li.none")).to_have_text(
                "No matches are assigned to you. An operator gives scorers their matches on "
                "the console (Scorers)."
            )
        async with phone(site, "olga") as (_, page):
            await expect(page.locator("#matches a[data-unit]")).to_have_count(3)


async def test_a_match_handed_over_refuses_the_queued_actions_and_the_device_says_why(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit, code = games.units[0], games.unit_codes[games.units[0]]
    async with running_console(database_url) as site:
        await site.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        await site.accounts.create("ben", "Ben Ode", "scorer", PASSWORD)
        assignments = Assignments(site.pool)
        await assignments.assign("mina", unit=code, by=("Olga Op", "test"))
        async with phone(site, "mina") as (context, page):
            await page.click(f'a[data-unit="{unit}"]')
            await tap(page, "start_period")
            await tap(page, "goal", 1)
            await expect(page.locator("#waiting")).to_have_attribute("data-count", "0")
            await expect(page.locator("#status")).to_contain_text("action 2")

            # The venue's Wi-Fi goes; Mina taps on; meanwhile the match is handed to Ben.
            site.wifi.cut()
            await context.set_offline(True)
            await tap(page, "goal", 1)
            await tap(page, "goal", 2)
            await expect(page.locator("#waiting")).to_have_attribute("data-count", "2")
            await expect(page.locator("#score-1")).to_have_text("2")  # shown at once
            assigned = site.scoring.app.assigned
            assert assigned is not None
            told = assigned.forgotten
            await assignments.assign("ben", unit=code, hand_over=True, by=("Olga Op", "test"))

            async def told_again() -> bool:
                return assigned.forgotten > told

            await eventually(told_again, within=10, what="the hand-over's NOTIFY")

            site.wifi.restore()
            await context.set_offline(False)
            await expect(page.locator("#waiting")).to_have_attribute(
                "data-count", "0", timeout=20_000
            )
            refused = page.locator("#refused li")
            await expect(refused).to_have_count(2)
            reason = (
                "Match 1 is assigned to Ben Ode, not to you: this action was not saved. "
                "Tell them or an operator what it was."
            )
            for n, team in enumerate(("JPN", "KOR")):
                said = rf"^Not saved: Goal · {team} football \(minute \d+\) — {re.escape(reason)}$"
                await expect(refused.nth(n)).to_have_text(re.compile(said))
            # The score is the server's again: what was saved before the hand-over stays.
            await expect(page.locator("#score-1")).to_have_text("1")
            await expect(page.locator("#score-2")).to_have_text("0")

            # The refusal stays on the device until Mina has seen it, on every screen.
            await page.reload()
            await expect(page.locator("body")).to_have_attribute("data-ready", "true")
            await expect(page.locator("#refused li")).to_have_count(2)
            await page.goto(f"{site.url}/score/#/")
            await expect(page.locator("#matches li.none")).to_be_visible()
            await expect(page.locator("#refusals")).to_be_visible()
            await page.click("#refused-seen")
            await expect(page.locator("#refusals")).to_be_hidden()
    rows = await db.fetch("SELECT seq, kind, actor_name FROM match_action ORDER BY seq")
    assert [tuple(r) for r in rows] == [
        (1, "start_period", "Mina Park"),
        (2, "goal", "Mina Park"),
    ]
    refusals = await db.fetch("SELECT kind, actor_name, screen, reason FROM scorer_refusal")
    assert [tuple(r) for r in refusals] == [("goal", "Mina Park", "scorer-console", reason)] * 2
