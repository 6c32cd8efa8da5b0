"""The operators' console says things as a person knows them, in headless
Chromium against the real stack: rows named by match, teams and discipline, times in the event's
zone with UTC on hover, a unit picker, a search that counts and finds teams, and a lookup form
that keeps what was typed."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Page, Route, expect

from tests.support.admin_console import Console
from tests.support.imports import MEDALS, SCHEDULE, GamesDay
from tests.support.scoring import running_console

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# The simulated Games are in Tokyo: a time on a page is Tokyo's, with UTC on hover.
TOKYO = re.compile(r"\d{2} [A-Z][a-z]{2} \d{2}:\d{2}:\d{2} JST")
UTC_HOVER = re.compile(r"UTC$")


async def _football(day: GamesDay, index: int = 0) -> tuple[dict[str, Any], list[str], str]:
    """A football unit of the simulator, its sides' names and its discipline's name, as ours."""
    units = [u for u in day.sim.reference()["units"] if u["disciplineCode"] == "FBL"]
    unit = units[index]
    sides = await day.db.fetch(
        "SELECT c.name FROM unit_competitor s JOIN unit u ON u.id = s.unit_id "
        "JOIN competitor c ON c.id = s.competitor_id WHERE u.code = $1 ORDER BY s.sort_order",
        unit["rsc"],
    )
    discipline = await day.db.fetchval("SELECT name FROM discipline WHERE code = 'FBL'")
    return unit, [s["name"] for s in sides], str(discipline)


async def test_a_run_s_rows_are_named_by_match_teams_and_discipline(console: Console) -> None:
    day = console.day
    unit, sides, discipline = await _football(day)
    assert len(sides) == 2
    day.sim.post_result(unit["externalId"], status="RUNNING")
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    ours = await day.wait_for_run(run.id)
    page = await console.page()
    await page.goto(f"{console.url}/runs/{ours['id']}")
    changed = page.locator("#section-changed")
    row = changed.locator("tr", has_text=unit["unitName"]).first
    await expect(row.get_by_role("link", name=unit["unitName"])).to_be_visible()
    await expect(row.locator("[data-unit-words]")).to_contain_text(discipline)
    await expect(row.locator("[data-unit-words]")).to_contain_text(f"{sides[0]} v {sides[1]}")
    # A side's field in words, by its team; the raw path only on hover.
    await expect(changed).to_contain_text(f"{sides[0]} result")
    await expect(changed).not_to_contain_text("sides[")
    # Scout's key is one click away, not the row's name.
    key = row.locator("details.key")
    await expect(key.locator("[data-key]")).to_be_hidden()
    await key.locator("summary").click()
    await expect(key.locator("[data-key]")).to_have_text(unit["externalId"])
    # The run's time is Tokyo's, with UTC on hover.
    when = page.get_by_role("heading", level=1).locator("time")
    await expect(when).to_have_text(TOKYO)
    await expect(when).to_have_attribute("title", UTC_HOVER)
    await console.shot(page, "run-rows-named")
    await page.close()


async def test_the_runs_screen_opens_on_the_integration_that_read_rows(console: Console) -> None:
    page = await console.page()
    await page.goto(f"{console.url}/runs")
    chosen = page.locator('.tabs a[aria-current="page"]')
    await expect(chosen).to_have_attribute("href", f"/runs?integration={SCHEDULE}")
    await expect(page.locator("[data-picked]")).to_contain_text("read rows most recently")
    first = page.locator("table.runs tbody tr").first
    await expect(first.locator("a time")).to_have_text(TOKYO)
    await console.shot(page, "runs-opened-on-rows")
    await page.close()


async def test_units_search_says_how_many_it_found_and_finds_teams(console: Console) -> None:
    day = console.day
    total = await day.db.fetchval("SELECT count(*) FROM unit")
    page = await console.page()
    await page.goto(f"{console.url}/units")
    found = page.locator("[data-found]")
    await expect(found).to_contain_text(f"Showing 50 of {total} units")
    await expect(found).to_contain_text("narrow your search")
    await expect(page.locator("table.units tbody tr")).to_have_count(50)
    unit, sides, _ = await _football(day, 1)
    await page.get_by_label("Find a unit").fill(f"{sides[0]} {sides[1]}")
    await page.get_by_role("button", name="Find").click()
    await expect(found).to_contain_text(re.compile(r"Found \d+ units?"))
    rows = page.locator("table.units tbody tr")
    await expect(rows.filter(has_text=unit["unitName"]).first).to_contain_text(sides[1])
    await expect(rows.first.locator("time")).to_have_attribute("title", UTC_HOVER)
    await console.shot(page, "units-found-by-team")
    # A unit's start is edited on the event's clock too: Tokyo's offset, not UTC's.
    await rows.filter(has_text=unit["unitName"]).first.get_by_role("link").click()
    await expect(page.get_by_label("start_at")).to_have_value(re.compile(r"\+09:00$"))
    await page.go_back()
    await page.get_by_label("Find a unit").fill("no such team anywhere")
    await page.get_by_role("button", name="Find").click()
    await expect(found).to_contain_text("No unit matches")
    await console.shot(page, "units-none-found")
    await page.close()


async def test_a_scorer_is_given_a_match_picked_by_team(console: Console) -> None:
    day = console.day
    unit, sides, _ = await _football(day, 2)
    page = await console.page()
    await page.goto(f"{console.url}/scorers")
    form = page.locator("#assign-form")
    await form.get_by_label("Scorer").select_option("sam")
    await form.get_by_label("Find the match").fill(f"{sides[0]} {sides[1]}")
    choice = form.locator("[data-picker-choices] button", has_text=unit["unitName"]).first
    # The picker searches as one types; a busy machine may take its time to answer.
    await expect(choice).to_be_visible(timeout=30_000)
    await expect(form.locator("[data-picker-found]")).to_contain_text(re.compile(r"Found \d+"))
    await console.shot(page, "scorers-unit-picker")
    await choice.click()
    await expect(form.get_by_label("Match: its unit code")).to_have_value(unit["rsc"])
    await expect(form.locator("[data-picker-found]")).to_contain_text(f"Chosen: {unit['unitName']}")
    await form.get_by_role("button", name="Assign").click()
    await expect(page.get_by_role("status")).to_contain_text("sam")
    assigned = await day.db.fetchval(
        "SELECT count(*) FROM scorer_assignment s JOIN account a ON a.id = s.account_id "
        "JOIN unit u ON u.id = s.unit_id WHERE a.login = 'sam' AND u.code = $1",
        unit["rsc"],
    )
    assert assigned == 1
    await page.close()


async def _held(console: Console, team: str = "SC-T-WORD9") -> tuple[dict[str, Any], Page]:
    """A row held for a team Scout names `team`, which no lookup maps; the waiting page open."""
    day = console.day
    unit, _, _ = await _football(day, 3)
    day.sim.swap_competitor(
        unit["externalId"], order=1, competitor_id=team, name="Words B", noc="JPN"
    )
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    assert (await day.wait_for_run(run.id))["outcomes"].get("held") == 1
    page = await console.page()
    await page.goto(f"{console.url}/waiting")
    return unit, page


async def test_a_held_row_is_named_by_its_match_and_a_wrong_code_is_an_error(
    console: Console,
) -> None:
    day = console.day
    unit, page = await _held(console)
    item = page.locator("article.item", has_text="SC-T-WORD9")
    await expect(item.get_by_role("link", name=unit["unitName"])).to_be_visible()
    ours = item.get_by_label("Ours (code or id)")
    # The example is one of this integration's real codes, not an invented one.
    example = await day.db.fetchval(
        "SELECT c.code FROM integration_lookup l JOIN integration i ON i.id = l.integration_id "
        "JOIN competitor c ON c.id = l.our_id WHERE i.code = $1 AND l.kind = 'competitor' "
        "ORDER BY c.code LIMIT 1",
        SCHEDULE,
    )
    await expect(ours).to_have_attribute("placeholder", f"e.g. {example}")
    await expect(item.locator("[data-add-it]:visible")).to_contain_text("reference load")
    await ours.fill("NO-SUCH-TEAM")
    await item.get_by_role("button", name="Add the lookup").click()
    item = page.locator("article.item", has_text="SC-T-WORD9")
    error = item.locator("p.error[role=alert]")
    await expect(error).to_contain_text("we have no competitor with the code or id")
    await expect(page.locator("p.said")).to_have_count(0)
    await expect(item.get_by_label("Ours (code or id)")).to_have_value("NO-SUCH-TEAM")
    await console.shot(page, "waiting-lookup-error")
    await item.get_by_label("Ours (code or id)").fill(example)
    await item.get_by_role("button", name="Add the lookup").click()
    await expect(page.get_by_role("status")).to_contain_text("go through on the next run")
    await page.close()


# -- The screenshot walk and the width check -----------------------------------------------


@pytest.mark.timeout(360)
async def test_a_partly_done_run_is_shown_as_partly_done(console: Console) -> None:
    """One batch cannot be saved (a unit's row stays locked past the command service's lock
    timeout, 30 s here, through the batch's tries): the run ends partly done, and its screens
    say so. About a minute and a half."""
    day = console.day
    units = day.sim.reference()["units"][200:240]
    for unit in units:
        day.sim.reschedule(unit["externalId"], venue="Partly Arena")
    blocker = await asyncpg.connect(day.database_url)
    lock = blocker.transaction()
    await lock.start()
    try:
        await blocker.execute("SELECT 1 FROM unit WHERE code = $1 FOR UPDATE", units[0]["rsc"])
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        cut = await day.wait_for_run(run.id, seconds=300)
    finally:
        await lock.rollback()
        await blocker.close()
    assert cut["status"] == "partly_done", cut["reason"]
    page = await console.page()
    await page.goto(f"{console.url}/runs/{cut['id']}")
    await expect(page.locator(".banner.guard")).to_contain_text("Partly done")
    await console.shot(page, "state-run-partly-done")
    await page.goto(f"{console.url}/runs?integration={SCHEDULE}")
    await expect(page.locator(f'[data-run="{cut["id"]}"]')).to_be_visible()
    await console.shot(page, "state-runs-partly-done")
    await page.close()


WIDTHS = (390, 800, 1280)


async def _pages(console: Console) -> dict[str, str]:
    """Every admin screen, by a name for its screenshot."""
    day = console.day
    run_id = await day.db.fetchval(
        "SELECT id::text FROM integration_run ORDER BY received_at DESC LIMIT 1"
    )
    unit_id = await day.db.fetchval("SELECT id::text FROM unit ORDER BY code LIMIT 1")
    return {
        "integrations": "/integrations",
        "runs": f"/runs?integration={SCHEDULE}",
        "runs-medals": f"/runs?integration={MEDALS}",
        "run": f"/runs/{run_id}",
        "waiting": "/waiting",
        "units": "/units",
        "unit": f"/units/{unit_id}",
        "scorers": "/scorers",
        "delivery": "/delivery",
        "accounts": "/accounts",
        "keys": "/keys",
    }


async def _overflow(page: Page) -> str:
    """What spills sideways once the page's live parts have loaded: "" when nothing does, else
    how many pixels too wide and the elements that reach furthest right (to say which)."""
    # The live parts stream (the network is never idle): wait until none says Loading….
    await page.wait_for_function(
        """() => ![...document.querySelectorAll("[data-live-status]")]
            .some(el => el.textContent.includes("Loading"))""",
        timeout=15_000,
    )
    spill: int = await page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    if spill <= 0:
        return ""
    widest: list[str] = await page.evaluate(
        """() => [...document.querySelectorAll("body *")]
            .map(el => [el.getBoundingClientRect().right, el])
            .filter(([right]) => right > document.documentElement.clientWidth)
            .sort((a, b) => b[0] - a[0]).slice(0, 3)
            .map(([right, el]) => `${el.tagName.toLowerCase()}.${el.className}`
                 + ` to ${Math.round(right)} px: ${el.textContent.trim().slice(0, 60)}`)"""
    )
    return f"{spill} px too wide ({'; '.join(widest)})"


async def test_no_screen_is_wider_than_a_phone_a_tablet_or_a_laptop(console: Console) -> None:
    """Every admin screen (and both sign-in pages) at 390, 800 and 1280 px: no sideways
    scrolling. A screenshot of each is kept."""
    wide: list[str] = []
    # A held row waits, so the waiting page shows its lookup form (its hint once made the
    # form's label column as wide as a sentence).
    _, held = await _held(console, "SC-T-WIDTH1")
    await held.close()
    page = await console.page("ada")
    pages = await _pages(console)
    for width in WIDTHS:
        await page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            await page.goto(f"{console.url}{path}")
            if spill := await _overflow(page):
                wide.append(f"{path} at {width} px: {spill}")
            await console.shot(page, f"walk-{name}-{width}")
    await page.close()
    async with running_console(console.day.database_url) as scorer_site:
        for width in WIDTHS:
            signed_out = await console.browser.new_page(viewport={"width": width, "height": 900})
            for name, url in (
                ("admin-sign-in", f"{console.url}/sign-in"),
                ("scorer-sign-in", f"{scorer_site.url}/score/"),
            ):
                await signed_out.goto(url)
                await expect(signed_out.get_by_label("Password")).to_be_visible()
                if spill := await _overflow(signed_out):
                    wide.append(f"{url} at {width} px: {spill}")
                await console.shot(signed_out, f"walk-{name}-{width}")
            await signed_out.close()
    assert wide == [], "pages that scroll sideways:\n" + "\n".join(wide)


async def test_the_live_parts_show_loading_and_failed_with_try_again(console: Console) -> None:
    """The states a live part passes through when its source is slow or gone: Loading…, then
    Failed to read with Try again; each screen with a live part (the cards, the runs list and a
    run's page) is photographed in both."""
    run_id = await console.day.db.fetchval(
        "SELECT id::text FROM integration_run ORDER BY received_at DESC LIMIT 1"
    )
    page = await console.page()
    held: list[Route] = []

    async def hold(route: Route) -> None:
        held.append(route)  # no answer yet: the page waits, as on a slow network

    for name, path, api in (
        ("integrations", "/integrations", "**/api/integrations*"),
        ("runs", f"/runs?integration={SCHEDULE}", "**/api/runs?*"),
        ("run-page", f"/runs/{run_id}", f"**/api/runs/{run_id}"),
    ):
        held.clear()
        await page.route(api, hold)
        await page.goto(f"{console.url}{path}")
        status = page.locator("[data-live-status]").first
        await expect(status).to_contain_text("Loading…")
        await console.shot(page, f"state-{name}-loading")
        for route in held:
            await route.abort("connectionrefused")
        await page.unroute(api)
        await page.route(api, lambda route: route.abort("connectionrefused"))
        await expect(status).to_contain_text("Failed to read")
        await expect(status.get_by_role("button", name="Try again")).to_be_visible()
        await console.shot(page, f"state-{name}-failed")
        await page.unroute(api)
        await status.get_by_role("button", name="Try again").click()
        await expect(status).to_be_hidden()
    await page.close()
