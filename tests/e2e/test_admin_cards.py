"""The integration cards and the run screens as an operator meets them (issues 31 and 32), in
headless Chromium against the real stack: counts of what waits, a pause shown as a pause,
confirmations, text that fits its card, bars that stop where the run stopped, and a medal row
withdrawn after a protest. One stack for the module; the tests run in order."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.async_api import Page, expect

from tests.support.admin_console import Console
from tests.support.imports import SCHEDULE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

MEDALS = "scout-medals"
LONG_URL = "https://scout.example.org/v1/jobs/schedule/runs/" + "a1b2c3d4" * 30 + "/items?offset=0"


async def _overflowing(page: Page) -> list[str]:
    """The cards (and the page) whose content is wider than their box."""
    found: list[str] = await page.evaluate(
        """() => {
          const wide = [...document.querySelectorAll("[data-card]")]
            .filter((c) => c.scrollWidth > c.clientWidth + 1).map((c) => c.dataset.card);
          if (document.documentElement.scrollWidth > window.innerWidth + 1) wide.push("page");
          return wide;
        }"""
    )
    return found


async def test_what_waits_is_counted_and_the_card_is_not_green(console: Console) -> None:
    day = console.day
    gone = day.sim.reference()["units"][7]["externalId"]
    day.sim.drop(gone)
    for _ in range(2):
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(run.id)
    page = await console.page()
    card = page.locator(f'[data-card="{SCHEDULE}"]')
    await expect(page.locator("[data-waiting-count]")).to_have_text("1")
    await expect(card.locator("[data-waiting]")).to_have_text("1")
    await expect(card).to_have_class(re.compile(r"\bnot-green\b"))
    await expect(card.locator("[data-verdict]")).not_to_have_text("All fine")
    await console.shot(page, "cards-waiting-counted")
    day.sim.restore(gone)
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    await day.wait_for_run(run.id)
    await page.close()


async def test_a_pause_is_a_pause_and_turn_off_asks_first(console: Console) -> None:
    page = await console.page()
    card = page.locator(f'[data-card="{MEDALS}"]')
    await card.get_by_role("button", name="Pause").click()
    card = page.locator(f'[data-card="{MEDALS}"]')
    await expect(card.locator("[data-verdict]")).to_have_text("Paused: nothing is read or written")
    await expect(card).to_have_class(re.compile(r"\bdeliberate\b"))
    edge = await card.evaluate("(c) => getComputedStyle(c).borderLeftColor")
    assert edge not in ("rgb(179, 38, 30)", "rgb(27, 127, 58)"), edge  # neither red nor green
    await console.shot(page, "cards-paused-neutral")
    # Turn off asks first: "No" leaves it paused, "Yes" turns it off.
    asked: list[str] = []

    async def say_no(dialog: object) -> None:
        asked.append(dialog.message)  # type: ignore[attr-defined]
        await dialog.dismiss()  # type: ignore[attr-defined]

    page.once("dialog", say_no)
    await card.get_by_role("button", name="Turn off").click()
    await expect(card.locator("[data-verdict]")).to_have_text("Paused: nothing is read or written")
    assert asked and "Turn off" in asked[0]
    page.once("dialog", lambda dialog: dialog.accept())
    await card.get_by_role("button", name="Turn off").click()
    await expect(page.locator(f'[data-card="{MEDALS}"] [data-verdict]')).to_have_text("Off")
    off = page.locator(f'[data-card="{MEDALS}"]')
    await expect(off).to_have_class(re.compile(r"\bdeliberate\b"))
    await expect(off.get_by_role("button", name="Resume")).to_be_visible()
    await console.shot(page, "state-integration-off")
    await page.goto(f"{console.url}/runs?integration={MEDALS}")
    await expect(page.locator(".banner.off")).to_contain_text("This integration is off")
    await console.shot(page, "state-runs-off")
    await page.goto(f"{console.url}/integrations")
    await page.locator(f'[data-card="{MEDALS}"]').get_by_role("button", name="Resume").click()
    await expect(page.get_by_role("status")).to_contain_text("now on")
    await page.close()


async def test_long_text_stays_in_its_card_at_1280_and_800(console: Console) -> None:
    day = console.day
    await day.db.execute(
        "INSERT INTO alert (integration_id, kind, message) VALUES ($1::uuid, 'quiet', $2)",
        day.schedule_id,
        f"No new run from Scout; the last was read from {LONG_URL}",
    )
    page = await console.page()
    try:
        for width in (1280, 800):
            await page.set_viewport_size({"width": width, "height": 900})
            await page.goto(f"{console.url}/integrations")
            await expect(page.locator(".alert", has_text="a1b2c3d4")).to_be_visible()
            assert await _overflowing(page) == [], width
            await console.shot(page, f"cards-long-url-{width}")
    finally:
        await day.db.execute("UPDATE alert SET status = 'cleared' WHERE kind = 'quiet'")
        await page.close()


async def test_a_paused_run_s_bar_is_not_full_and_its_reason_is_said_once(
    console: Console,
) -> None:
    day = console.day
    day.sim.shorten_next_run(100)
    short = await day.sim.make_run("schedule", wait_doorbell=True)
    paused = await day.wait_for_run(short.id)
    assert paused["status"] == "paused_by_guard"
    page = await console.page()
    await page.goto(f"{console.url}/runs/{paused['id']}")
    bar = page.locator("[data-bar]")
    await expect(bar).to_have_attribute("value", "0")
    await expect(page.locator("[data-batches]")).to_have_text("nothing written")
    said = await page.locator("main").inner_text()
    assert said.count("Scout sent 100 rows") == 1, said
    await console.shot(page, "run-paused-bar-and-banner")
    await page.goto(f"{console.url}/runs?integration={SCHEDULE}")
    row = page.locator(f'tr[data-run="{paused["id"]}"]')
    await expect(row.locator("[data-kind]")).to_have_text("full run")
    await expect(row.locator("[data-bar]")).to_have_attribute("value", "0")
    await console.shot(page, "runs-kind-and-bars")
    # Started: Running (or already Done), never "Paused by a check" with Start again.
    await page.goto(f"{console.url}/runs/{paused['id']}")
    await page.locator("main").get_by_role("button", name="Start").click()
    await expect(page.get_by_role("status")).to_contain_text("run started")
    await expect(page.locator("[data-word]").first).to_have_text(re.compile("Running|Done"))
    await expect(page.locator("main").get_by_role("button", name="Start")).to_have_count(0)
    await day.wait_for_run(short.id)
    await page.close()


async def test_a_medal_withdrawn_after_a_protest_is_removed_from_waiting(
    console: Console,
) -> None:
    day = console.day
    final = next(
        unit.external_id
        for unit in day.sim.games.units.values()
        if unit.medals not in ("none", "bronze") and len(unit.contestants) > 3
    )
    async with httpx.AsyncClient(base_url=day.sim.base_url, timeout=10) as sim:
        official = await sim.post(f"/control/units/{final}/official", json={})
        assert official.status_code == 200, official.text
        totals = {r["noc"]: r["total"] for r in (await sim.get("/control/medals")).json()["medals"]}
        medallist = next(
            c
            for c in official.json()["unit"]["competitors"]
            if c["medal"] and totals.get(c["noc"]) == 1
        )
        run = await day.sim.make_run("medals", wait_doorbell=True)
        await day.wait_for_run(run.id)
        # The protest is upheld: the NOC's only medal is taken back, its row leaves the table.
        upheld = await sim.post(
            f"/control/units/{final}/disqualify", json={"externalId": medallist["externalId"]}
        )
        assert upheld.status_code == 200, upheld.text
    for _ in range(2):
        run = await day.sim.make_run("medals", wait_doorbell=True)
        await day.wait_for_run(run.id)
    page = await console.page()
    await page.goto(f"{console.url}/waiting")
    item = page.locator("article.item", has_text=medallist["noc"])
    await expect(item.get_by_role("button", name="Confirm: cancel the unit")).to_have_count(0)
    await console.shot(page, "waiting-medal-row")
    page.once("dialog", lambda dialog: dialog.accept())
    await item.get_by_role("button", name="Confirm: remove the medal row").click()
    await expect(page.get_by_role("status")).to_contain_text("removed")
    total = await day.db.fetchval(
        "SELECT total FROM medal_row WHERE noc = $1 AND discipline_id IS NULL", medallist["noc"]
    )
    assert total == 0
    await page.close()
