"""The admin states the screenshot walk had not yet photographed, reached by
the real stack in headless Chromium: a run that failed, with its reason, on the runs list and
its own page; a Scout run that failed its own checks; and a held row's lookup whose unit picker
comes and goes with the Kind chosen, without a reload."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Page, expect

from tests.support.admin_console import Console
from tests.support.imports import SCHEDULE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def _runs_row_and_page(console: Console, run_id: str, name: str) -> tuple[Page, Any]:
    """The runs list on the schedule integration, its row of that run and a screenshot."""
    page = await console.page()
    await page.goto(f"{console.url}/runs?integration={SCHEDULE}")
    row = page.locator(f'tr[data-run="{run_id}"]')
    await expect(row).to_be_visible()
    await console.shot(page, f"state-runs-with-{name}-run")
    return page, row


async def test_a_failed_run_says_so_with_its_reason(console: Console) -> None:
    day = console.day
    day.sim.malform_next_page("not_json")
    try:
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        failed = await day.wait_for_run(run.id)
    finally:
        day.sim.clear_faults()
    assert failed["status"] == "failed", failed
    assert "is not JSON" in failed["reason"]
    page, row = await _runs_row_and_page(console, failed["id"], "failed")
    await expect(row.locator("[data-word]")).to_have_text("Failed")
    await expect(row.locator("[data-reason]")).to_contain_text("is not JSON")
    await expect(row.locator("[data-bar]")).to_have_attribute("value", "0")
    await row.get_by_role("link").click()
    banner = page.locator(".banner.guard")
    await expect(banner).to_contain_text("Failed:")
    await expect(banner).to_contain_text("is not JSON")
    await expect(banner).to_contain_text("Nothing from this run was written")
    await expect(page.locator("[data-word]").first).to_have_text("Failed")
    await console.shot(page, "state-run-status-failed")
    await page.close()


async def test_a_scout_run_that_failed_its_own_checks_says_so(console: Console) -> None:
    day = console.day
    run = await day.sim.make_run(
        "schedule", fail_checks="the results page timed out", wait_doorbell=True
    )
    refused = await day.wait_for_run(run.id)
    assert refused["status"] == "scout_failed", refused
    page, row = await _runs_row_and_page(console, refused["id"], "scout-failed")
    await expect(row.locator("[data-word]")).to_have_text("Scout's run failed its checks")
    await expect(row.locator("[data-reason]")).to_contain_text("the results page timed out")
    await row.get_by_role("link").click()
    head = page.locator("[data-status]")
    await expect(head.locator("[data-word]")).to_have_text("Scout's run failed its checks")
    await expect(head.locator("[data-reason]")).to_contain_text("the results page timed out")
    await console.shot(page, "state-run-status-scout-failed")
    await page.goto(f"{console.url}/integrations")
    scout = page.locator(f'[data-card="{SCHEDULE}"] [data-health="scout"]')
    await expect(scout.locator("[data-word]")).to_have_text("Failed its checks")
    await console.shot(page, "state-integrations-scout-failed")
    await page.close()


async def test_the_unit_picker_comes_with_the_kind_unit_without_a_reload(
    console: Console,
) -> None:
    day = console.day
    football = [u for u in day.sim.reference()["units"] if u["disciplineCode"] == "FBL"]
    held, wanted = football[4], football[5]
    day.sim.swap_competitor(
        held["externalId"], order=1, competitor_id="SC-T-KIND9", name="Kind B", noc="JPN"
    )
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    assert (await day.wait_for_run(run.id))["outcomes"].get("held") == 1
    page = await console.page()
    await page.goto(f"{console.url}/waiting")
    item = page.locator("article.item", has_text="SC-T-KIND9")
    find = item.get_by_label("Find our unit by name, team or date")
    await expect(item.get_by_label("Kind")).to_have_value("competitor")
    await expect(find).to_be_hidden()
    # A reload would forget this mark: it is still there when the picker shows.
    await page.evaluate("window.notReloaded = true")
    await item.get_by_label("Kind").select_option("unit")
    await expect(find).to_be_visible()
    # The hint speaks of the kind chosen: where a unit comes from, not a competitor.
    hint = item.locator("[data-add-it]:visible")
    await expect(hint).to_have_count(1)
    await expect(hint).to_contain_text("No such unit of ours yet")
    await find.fill(wanted["unitName"])
    choice = item.locator("[data-picker-choices] button", has_text=wanted["unitName"]).first
    # The picker searches as one types; a busy machine may take its time to answer.
    await expect(choice).to_be_visible(timeout=30_000)
    await console.shot(page, "waiting-kind-unit-picker")
    code = await choice.get_attribute("data-code")
    assert code
    await choice.click()
    await expect(item.get_by_label("Ours (code or id)")).to_have_value(code)
    await item.get_by_label("Kind").select_option("competitor")
    await expect(find).to_be_hidden()
    await expect(item.locator("[data-add-it]:visible")).to_contain_text("No such competitor")
    await expect(item.locator("[data-picker-found]")).to_be_hidden()
    assert await page.evaluate("window.notReloaded === true")
    await page.close()
