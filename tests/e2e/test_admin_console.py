"""The operators' console in headless Chromium against the real stack: command, imports, the
Scout simulator and the console itself. One stack for the module; the tests run in order."""

from __future__ import annotations

import asyncio
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from omnium_accounts import Accounts, SignInRefused, hash_key
from omnium_admin import AdminApp
from omnium_admin._auth import PUBLIC
from omnium_db import PoolRoad, create_pool
from tests.conftest import REPO
from tests.support.delivery import eventually
from tests.support.gateway import RunningGateway, running_gateway
from tests.support.imports import SCHEDULE, GamesDay, games_day, import_settings
from tests.support.servers import Servers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

PASSWORD = "correct horse battery"
MEDALS = "scout-medals"


@dataclass(slots=True)
class Console:
    day: GamesDay
    app: AdminApp
    browser: Browser
    shots: Path
    operator_id: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.app.port}"

    async def page(self, login: str = "ana") -> Page:
        page = await self.browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(30_000)
        await page.goto(f"{self.url}/integrations")
        await page.get_by_label("Login").fill(login)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("heading", name="Integrations")).to_be_visible()
        return page

    async def shot(self, page: Page, name: str) -> None:
        path = self.shots / f"{name}.png"
        # A picture for people, not an assertion. The live pages reload themselves when a run
        # starts or ends, and a capture begun just as one reloads can wait for a frame that
        # never comes: capture once the page has loaded, and once more if the first stalls.
        for attempt in (1, 2):
            await page.bring_to_front()
            await page.wait_for_load_state("load")
            try:
                await page.screenshot(path=str(path), full_page=True, timeout=15_000)
                break
            except PlaywrightTimeoutError:
                if attempt == 2:
                    raise
        # Kept in the repo's artifacts/ (gitignored) so a CI run can keep them.
        keep = REPO / "artifacts" / "screenshots"
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, keep / path.name)


@pytest.fixture(scope="module")
async def module_database(servers: Servers, template_database: str) -> AsyncIterator[str]:
    name = f"omnium_e2e_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(servers.admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
        yield servers.url_for(name)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(scope="module")
async def console(
    module_database: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Console]:
    async with games_day(
        module_database,
        # A batch waits on a row lock the progress test holds, rather than giving up.
        command_settings={"import_lock_timeout_seconds": 30.0},
    ) as day:
        settings = import_settings(
            module_database,
            day.command.port,
            imports_address=f"127.0.0.1:{day.imports.grpc_port}",
            admin_refresh_seconds=0.3,
        )
        pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="e2e", size=2)
        accounts = Accounts(pool, settings)
        operator = await accounts.create("ana", "Ana Operator", "operator", PASSWORD)
        await accounts.create("vic", "Vic Viewer", "viewer", PASSWORD)
        await accounts.create("sam", "Sam Scorer", "scorer", PASSWORD)
        await accounts.create("lou", "Lou Locked", "operator", PASSWORD)
        await accounts.create("ada", "Ada Admin", "admin", PASSWORD)
        await pool.close()
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        assert (await day.wait_for_run(first.id))["status"] == "done"
        app = AdminApp(settings)
        await app.start(0)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
            )
            try:
                yield Console(
                    day, app, browser, tmp_path_factory.mktemp("screenshots"), str(operator.id)
                )
            finally:
                await browser.close()
                await app.stop()


def _card(page: Page, code: str = SCHEDULE) -> tuple[object, object]:
    card = page.locator(f'[data-card="{code}"]')
    return card, card.locator('[data-health="omnium"] [data-word]')


def _every_route(app: AdminApp) -> list[tuple[str, str]]:
    """(method, path) for every page, JSON endpoint and action the console serves, each
    placeholder filled in and each alternative of an {action:a|b} route listed."""
    values = {"code": SCHEDULE, "run_id": str(uuid.uuid4()), "unit_id": str(uuid.uuid4())}
    values["item_id"] = "1"
    values["assignment_id"] = "1"
    values["login"] = "sam"
    values["name"] = "dailyhunt"
    out = []
    assert app.runner is not None
    for route in app.runner.app.router.routes():
        if route.method not in ("GET", "POST") or route.resource is None:
            continue
        info = route.resource.get_info()
        template = info.get("path") or info.get("formatter")
        if template is None or template in PUBLIC:
            continue  # the static folder and the sign-in page itself
        pattern = info.get("pattern")
        actions = re.search(r"\(\?P<action>([^)]+)\)", pattern.pattern) if pattern else None
        for action in actions[1].split("|") if actions else [""]:
            out.append((route.method, template.format(**values, action=action)))
    return out


async def test_every_page_and_action_needs_a_session(console: Console) -> None:
    routes = _every_route(console.app)
    assert len([m for m, _ in routes if m == "POST"]) >= 10
    async with httpx.AsyncClient(base_url=console.url, follow_redirects=False) as anon:
        for method, path in routes:
            answer = await anon.request(method, path, data={"csrf_token": "x"})
            if method == "GET" and not path.startswith("/api/"):
                assert answer.status_code == 303, path
                assert answer.headers["location"].startswith("/sign-in?next=")
            else:
                assert answer.status_code == 401, (method, path)
        # A sign-in form posted from elsewhere carries no sign-in cookie: refused, not tried.
        forged = await anon.post(
            "/sign-in", data={"csrf_token": "x", "login": "ana", "password": PASSWORD}
        )
        assert forged.status_code == 403 and "omnium_session" not in forged.headers.get(
            "set-cookie", ""
        )
    async with httpx.AsyncClient(base_url=console.url, follow_redirects=False) as ana:
        await _sign_in(ana, "ana")
        assert (await ana.get("/integrations")).status_code == 200
        # A forged form: the session cookie rides along, the CSRF token does not.
        for method, path in routes:
            if method == "POST":
                forged = await ana.post(path, data={"login": "x"})
                assert forged.status_code == 403, path
                assert "security token" in forged.text
        wrong = await ana.post(f"/integrations/{SCHEDULE}/pause", data={"csrf_token": "guess"})
        assert wrong.status_code == 403
        assert (await ana.get("/integrations")).status_code == 200  # still signed in
    async with httpx.AsyncClient(base_url=console.url, follow_redirects=False) as vic:
        token = await _sign_in(vic, "vic")
        assert (await vic.get("/integrations")).status_code == 200
        refused = await vic.post(f"/integrations/{SCHEDULE}/pause", data={"csrf_token": token})
        assert refused.status_code == 403 and "viewer" in refused.text
    async with httpx.AsyncClient(base_url=console.url, follow_redirects=False) as sam:
        await _sign_in(sam, "sam")
        scorer = await sam.get("/integrations")
        assert scorer.status_code == 403 and "Scorer accounts" in scorer.text
    assert (await _state(console))[SCHEDULE] == "on"


async def _sign_in(client: httpx.AsyncClient, login: str) -> str:
    form = await client.get("/sign-in")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert token is not None
    answer = await client.post(
        "/sign-in", data={"csrf_token": token[1], "login": login, "password": PASSWORD}
    )
    assert answer.status_code == 303, answer.text
    cookie = next(c for c in answer.headers.get_list("set-cookie") if "omnium_session=" in c)
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    page = await client.get("/integrations")
    session_token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    return session_token[1] if session_token else ""


async def _state(console: Console) -> dict[str, str]:
    rows = await console.day.db.fetch("SELECT code, state FROM integration")
    return {r["code"]: r["state"] for r in rows}


async def test_sign_in_slows_down_after_failures(console: Console) -> None:
    page = await console.browser.new_page()
    await page.goto(f"{console.url}/runs")
    for _ in range(6):
        await page.get_by_label("Login").fill("lou")
        await page.get_by_label("Password").fill("not the password")
        async with page.expect_navigation():
            await page.get_by_role("button", name="Sign in").click()
        await expect(page.locator("#sign-in-error")).to_be_visible()
    await expect(page.locator("#sign-in-error")).to_contain_text("Too many failed sign-ins")
    await expect(page.locator("#sign-in-error")).to_contain_text(re.compile(r"\d+ s"))
    await console.shot(page, "sign-in-slowed-down")
    await page.close()


async def test_a_card_turns_failing_when_scout_answers_500_and_back(console: Console) -> None:
    day = console.day
    page = await console.page()
    card, omnium = _card(page)
    await expect(omnium).to_have_text("On time")
    await expect(card).to_have_class(re.compile(r"\bgreen\b"))
    await console.shot(page, "integrations-on-time")
    await page.set_viewport_size({"width": 820, "height": 1180})
    await console.shot(page, "integrations-on-time-tablet")
    await page.set_viewport_size({"width": 1280, "height": 900})
    day.sim.fail_next(1000, path_prefix="/v1/")
    await card.get_by_role("button", name="Run now").click()
    await expect(page.get_by_role("status")).to_contain_text("queued")
    await expect(omnium).to_have_text("Failing", timeout=30_000)
    await expect(card).to_have_class(re.compile(r"not-green"))
    await expect(card.locator("[data-alerts]")).to_contain_text("HTTP 500")
    await console.shot(page, "integrations-failing")
    day.sim.clear_faults()
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    await day.wait_for_run(run.id)
    # No reload: the card's live part polls and turns back by itself.
    await expect(omnium).to_have_text("On time", timeout=30_000)
    await expect(card).to_have_class(re.compile(r"\bgreen\b"))
    await page.close()


async def test_a_card_added_just_now_waits_for_its_first_run(console: Console) -> None:
    """The medal integration has no run yet and was added a moment ago: not "Needs a look" and
    not "Late", but waiting, and not green either (nothing is in yet)."""
    page = await console.page()
    card, omnium = _card(page, MEDALS)
    await expect(omnium).to_have_text("Not due yet")
    await expect(card.locator("[data-verdict]")).to_have_text("Waiting for its first run")
    await expect(card).to_have_class(re.compile(r"\bstarting\b"))
    await expect(card).to_have_class(re.compile(r"\bnot-green\b"))
    await console.shot(page, "integrations-first-run-not-due")
    await page.close()


async def test_pause_off_and_resume_show_on_the_card(console: Console) -> None:
    page = await console.page()
    card, omnium = _card(page, MEDALS)
    await card.get_by_role("button", name="Pause").click()
    card, omnium = _card(page, MEDALS)
    await expect(omnium).to_have_text("Paused")
    await card.get_by_role("button", name="Turn off").click()
    await expect(_card(page, MEDALS)[1]).to_have_text("Off")
    await console.shot(page, "integrations-paused-and-off")
    await page.goto(f"{console.url}/runs?integration={MEDALS}")
    await expect(page.get_by_text("No runs yet.")).to_be_visible()
    await expect(page.get_by_text("This integration is off")).to_be_visible()
    await console.shot(page, "runs-empty-and-off")
    await page.get_by_role("button", name="Turn on").click()
    await expect(page.get_by_role("status")).to_contain_text("now on")
    assert (await _state(console))[MEDALS] == "on"
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.goto(f"{console.url}/waiting")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await expect(page.locator('input[name="next"]')).to_have_value("/waiting")
    await page.close()


async def test_a_run_s_bar_moves_while_it_runs(console: Console) -> None:
    day = console.day
    units = day.sim.reference()["units"]
    changed = units[100:175]
    for unit in changed:
        day.sim.reschedule(unit["externalId"], venue="Progress Arena")
    page = await console.page()
    await page.goto(f"{console.url}/runs?integration={SCHEDULE}")
    held = await asyncpg.connect(day.database_url)
    lock = held.transaction()
    await lock.start()
    try:
        # One changed unit is locked: its batch waits, every other batch goes through.
        await held.execute(
            "SELECT 1 FROM unit WHERE code = $1 FOR UPDATE", changed[len(changed) // 2]["rsc"]
        )
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await _run_id(day, run.id)
        row = page.locator(f'[data-run="{ours}"]')
        bar = row.locator("[data-bar]")
        await expect(row.locator("[data-word]")).to_have_text("Running", timeout=30_000)
        # Every batch but the locked one is done, and the bar shows it while the run waits.
        await page.wait_for_function(
            """id => {
                const bar = document.querySelector(`[data-run="${id}"] [data-bar]`);
                return bar && bar.max >= 2 && bar.value === bar.max - 1;
            }""",
            arg=ours,
            timeout=30_000,
        )
        total = int(await bar.evaluate("bar => bar.max"))
        await expect(row.locator("[data-batches]")).to_have_text(f"{total - 1} / {total}")
        await expect(row.locator("[data-word]")).to_have_text("Running")
        await console.shot(page, "runs-running")
        detail = await console.page()
        await detail.goto(f"{console.url}/runs/{ours}")
        await expect(detail.locator("[data-word]").first).to_have_text("Running")
        await console.shot(detail, "run-running")
    finally:
        await lock.rollback()
        await held.close()
    await expect(row.locator("[data-batches]")).to_have_text(f"{total} / {total}", timeout=30_000)
    await expect(row.locator("[data-word]")).to_have_text("Done")
    await expect(bar).to_have_js_property("value", total)
    # The run's own page reloads itself when the run ends, with what changed.
    await expect(detail.locator("#section-changed")).to_contain_text("Progress Arena")
    await console.shot(detail, "run-done")
    await page.close()
    await detail.close()


async def _run_id(day: GamesDay, scout_run_id: str) -> str:
    for _ in range(600):
        found = await day.db.fetchval(
            "SELECT id::text FROM integration_run WHERE scout_run_id = $1", scout_run_id
        )
        if found:
            return str(found)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no run of {scout_run_id}")


async def test_a_field_set_by_hand_is_kept_and_listed(console: Console) -> None:
    day = console.day
    unit = day.sim.reference()["units"][0]
    page = await console.page()
    await page.get_by_role("link", name="Units", exact=True).click()
    await page.get_by_label("Find a unit").fill(unit["rsc"])
    await page.get_by_role("button", name="Find").click()
    await page.locator("table.units a").first.click()
    await page.get_by_label("venue").fill("Toyota Stadium")
    await page.get_by_role("button", name="Save").click()
    await expect(page.get_by_role("status")).to_contain_text("Saved and pinned: venue")
    await expect(page.get_by_text("(set by hand)")).to_be_visible()
    await console.shot(page, "unit-pinned")
    actor = await day.db.fetchrow(
        "SELECT actor_kind, actor_name, source_code, screen FROM timeline_item "
        "WHERE code = 'units.set_fields' ORDER BY id DESC LIMIT 1"
    )
    assert tuple(actor) == (
        "person",
        "Ana Operator",
        f"account:{console.operator_id}",
        "admin:unit-edit",
    )
    day.sim.reschedule(unit["externalId"], venue="Nagoya Dome")
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    ours = await day.wait_for_run(run.id)
    await page.goto(f"{console.url}/runs?integration={SCHEDULE}")
    await page.locator(f'[data-run="{ours["id"]}"] a').click()
    kept = page.locator("#section-kept")
    await expect(kept).to_contain_text(unit["externalId"])
    await expect(kept).to_contain_text("venue")
    await expect(kept).to_contain_text("ours: Toyota Stadium; Scout sent: Nagoya Dome")
    await console.shot(page, "run-kept-by-hand")
    venue = await day.db.fetchval("SELECT venue FROM unit WHERE code = $1", unit["rsc"])
    assert venue == "Toyota Stadium"
    await page.goto(f"{console.url}/units?q={unit['rsc']}")
    await page.locator("table.units a").first.click()
    await page.get_by_role("button", name="Unpin venue").click()
    await expect(page.get_by_role("status")).to_contain_text("Unpinned venue")
    pinned = await day.db.fetchval("SELECT pinned FROM unit WHERE code = $1", unit["rsc"])
    assert pinned == []
    await page.close()


async def test_a_changed_row_links_to_its_unit_s_page(console: Console) -> None:
    day = console.day
    unit = day.sim.reference()["units"][3]
    day.sim.reschedule(unit["externalId"], venue="Linked Arena")
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    ours = await day.wait_for_run(run.id)
    unit_id = await day.db.fetchval("SELECT id::text FROM unit WHERE code = $1", unit["rsc"])
    page = await console.page()
    await page.goto(f"{console.url}/runs/{ours['id']}")
    changed = page.locator("#section-changed")
    await expect(changed).to_contain_text("Linked Arena")
    await changed.get_by_role("link", name=unit["externalId"]).click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(unit["unitName"])
    await expect(page.get_by_label("venue")).to_have_value("Linked Arena")
    assert page.url == f"{console.url}/units/{unit_id}"
    await page.close()


async def test_a_side_s_pin_is_shown_and_unpinned(console: Console) -> None:
    day = console.day
    unit = day.sim.reference()["units"][5]
    unit_id = await day.db.fetchval("SELECT id::text FROM unit WHERE code = $1", unit["rsc"])
    # Set by hand elsewhere (a scorer's correction, say): the console did not make this pin.
    answer = await day.command.submit(
        command_id=f"e2e-side-pin-{uuid.uuid4()}",
        code="units.set_fields",
        unit_id=unit_id,
        payload={"sides": [{"order": 1, "result": "DNS"}]},
    )
    assert answer.reason == ""
    page = await console.page()
    await page.goto(f"{console.url}/units/{unit_id}")
    side = page.locator('[data-side="1"]')
    await expect(side).to_contain_text("DNS")
    await expect(side).to_contain_text("(set by hand)")
    await expect(page.locator("[data-pins]")).to_contain_text("sides[1].result")
    await console.shot(page, "unit-side-pinned")
    await page.get_by_role("button", name="Unpin sides[1].result").click()
    await expect(page.get_by_role("status")).to_contain_text("Unpinned sides[1].result")
    await expect(page.locator('[data-side="1"]')).not_to_contain_text("(set by hand)")
    pinned = await day.db.fetchval(
        "SELECT s.pinned FROM unit_competitor s WHERE s.unit_id = $1 AND s.sort_order = 1",
        unit_id,
    )
    actor = await day.db.fetchrow(
        "SELECT actor_name, screen FROM timeline_item WHERE code = 'units.unpin' "
        "ORDER BY id DESC LIMIT 1"
    )
    assert pinned == []
    assert tuple(actor) == ("Ana Operator", "admin:unit-edit")
    await page.close()


async def test_a_held_row_is_resolved_from_waiting_for_you(console: Console) -> None:
    day = console.day
    unit = next(u for u in day.sim.reference()["units"] if u["disciplineCode"] == "FBL")
    day.sim.swap_competitor(
        unit["externalId"], order=1, competitor_id="SC-T-KOR3", name="Korea B", noc="KOR"
    )
    held_run = await day.sim.make_run("schedule", wait_doorbell=True)
    held = await day.wait_for_run(held_run.id)
    assert held["outcomes"].get("held") == 1
    team = await day.db.fetchval(
        "INSERT INTO competitor (event_id, kind, code, name, noc) "
        "SELECT id, 'team', 'KOR-B', 'Korea B', 'KOR' FROM event RETURNING id::text"
    )
    page = await console.page()
    await page.get_by_role("link", name="Waiting for you", exact=True).click()
    item = page.locator("article.item", has_text="SC-T-KOR3")
    await expect(item.get_by_label("Scout's id")).to_have_value("SC-T-KOR3")
    await console.shot(page, "waiting-held")
    await item.get_by_label("Ours (code or id)").fill("KOR-B")
    await item.get_by_role("button", name="Add the lookup").click()
    await expect(page.get_by_role("status")).to_contain_text("go through on the next run")
    passed_run = await day.sim.make_run("schedule", wait_doorbell=True)
    passed = await day.wait_for_run(passed_run.id)
    side = await day.db.fetchval(
        "SELECT s.competitor_id::text FROM unit_competitor s JOIN unit u ON u.id = s.unit_id "
        "WHERE u.code = $1 AND s.sort_order = 1",
        unit["rsc"],
    )
    assert passed["outcomes"].get("accepted") == 1
    assert side == team
    await page.reload()
    await expect(page.get_by_text("Nothing is waiting for you.")).to_be_visible()
    await console.shot(page, "waiting-empty")
    await page.close()


async def test_a_missing_key_is_confirmed_as_a_person_s_cancel(console: Console) -> None:
    day = console.day
    gone = day.sim.reference()["units"][40]
    day.sim.drop(gone["externalId"])
    for _ in range(2):
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(run.id)
    page = await console.page()
    await page.goto(f"{console.url}/waiting")
    item = page.locator("article.item", has_text=gone["externalId"])
    await expect(item).to_contain_text("no longer list")
    await console.shot(page, "waiting-missing")
    await item.get_by_role("button", name="Confirm: cancel the unit").click()
    await expect(page.get_by_role("status")).to_contain_text("cancelled")
    status = await day.db.fetchval("SELECT status FROM unit WHERE code = $1", gone["rsc"])
    actor = await day.db.fetchrow(
        "SELECT actor_name, source_code, screen FROM timeline_item "
        "WHERE code = 'results.set_status' ORDER BY id DESC LIMIT 1"
    )
    assert status == "CANCELLED"
    assert tuple(actor) == ("Ana Operator", f"account:{console.operator_id}", "admin:waiting")
    day.sim.restore(gone["externalId"])
    await page.close()


async def test_start_a_run_a_check_paused(console: Console) -> None:
    day = console.day
    day.sim.shorten_next_run(100)
    for unit in day.sim.reference()["units"][:100]:
        day.sim.reschedule(unit["externalId"], venue="Short Run Venue")
    short = await day.sim.make_run("schedule", wait_doorbell=True)
    paused = await day.wait_for_run(short.id)
    assert paused["status"] == "paused_by_guard"
    page = await console.page()
    _, omnium = _card(page)
    await expect(omnium).to_have_text("Stopped by a check")
    await console.shot(page, "integrations-stopped-by-a-check")
    await page.goto(f"{console.url}/runs?integration={SCHEDULE}")
    await expect(page.locator(".banner.guard")).to_contain_text("Scout sent 100 rows")
    await console.shot(page, "runs-paused-by-a-check")
    await page.get_by_role("link", name="Waiting for you", exact=True).click()
    guard = page.locator("article.item", has_text="Scout sent 100 rows")
    await console.shot(page, "waiting-guard")
    await guard.get_by_role("button", name="Start").click()
    await expect(page.get_by_role("status")).to_contain_text("queued again")
    started = await day.wait_for_run(short.id)
    moved = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Short Run Venue'")
    assert started["status"] == "done"
    assert moved == 100
    await page.goto(f"{console.url}/runs/{paused['id']}")
    await expect(page.locator("[data-word]").first).to_have_text("Done")
    await page.goto(f"{console.url}/runs?integration={SCHEDULE}")
    await expect(page.locator("figure.chart svg g")).to_have_count(
        await day.db.fetchval(
            "SELECT count(*) FROM integration_run WHERE status NOT IN ('received', 'applying')"
        )
    )
    await console.shot(page, "runs")
    await page.close()


async def test_a_console_that_cannot_reach_imports_says_failed_to_read(
    console: Console,
) -> None:
    broken = AdminApp(
        console.app.settings.replace(imports_address="127.0.0.1:9", grpc_deadline_seconds=1.0)
    )
    await broken.start(0)
    try:
        page = await console.browser.new_page()
        await page.goto(f"http://127.0.0.1:{broken.port}/integrations")
        await page.get_by_label("Login").fill("ana")
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("heading", name="Failed to read")).to_be_visible()
        await expect(page.get_by_role("link", name="Try again")).to_be_visible()
        await console.shot(page, "failed-to-read")
        await page.close()
    finally:
        await broken.stop()


async def test_with_sign_in_off_pages_read_as_a_viewer_and_actions_still_need_it(
    console: Console,
) -> None:
    open_app = AdminApp(console.app.settings.replace(admin_sign_in_required=False))
    await open_app.start(0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{open_app.port}") as anon:
            page = await anon.get("/integrations")
            action = await anon.post(f"/integrations/{SCHEDULE}/pause", data={"csrf_token": ""})
    finally:
        await open_app.stop()
    assert page.status_code == 200 and "nobody (sign-in is off)" in page.text
    assert "Run now" not in page.text  # a viewer sees no actions
    assert action.status_code == 401
    assert (await _state(console))[SCHEDULE] == "on"


class Cable:
    """A plain TCP relay to the imports service that the test can cut and mend: the console
    loses its source mid-page the way a restart or a network fault would."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def mend(self) -> None:
        self.server = await asyncio.start_server(
            self._relay, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        self.writers.clear()
        await self.server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


async def test_a_live_part_that_cannot_read_says_so_and_tries_again(console: Console) -> None:
    cable = Cable(console.day.imports.grpc_port)
    await cable.mend()
    app = AdminApp(
        console.app.settings.replace(
            imports_address=f"127.0.0.1:{cable.port}", grpc_deadline_seconds=2.0
        )
    )
    await app.start(0)
    page = await console.browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        await page.goto(f"http://127.0.0.1:{app.port}/integrations")
        await page.get_by_label("Login").fill("ana")
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        await expect(_card(page)[1]).to_have_text("On time")
        await cable.cut()
        status = page.locator("[data-live-status]")
        await expect(status).to_contain_text("Failed to read", timeout=20_000)
        retry = status.get_by_role("button", name="Try again")
        await expect(retry).to_be_visible()
        await console.shot(page, "integrations-failed-to-read")
        # Try again reads at once (the section counts its tries), and still says it failed.
        live = page.locator('[data-live="integrations"]')
        # Stop the page's clock, so from here only the button polls; a timer set before the
        # stop may fire once, so wait for that poll to end before counting.
        await page.clock.install()
        await page.clock.pause_at(datetime.now(UTC) + timedelta(seconds=1))
        await page.wait_for_timeout(1000)
        await expect(live).not_to_have_attribute("aria-busy", "true")
        tries = int(await live.get_attribute("data-tries") or "0")
        await retry.click()
        await expect(live).to_have_attribute("data-tries", str(tries + 1))
        await expect(status).to_contain_text("Failed to read")
        # Mended: Try again (and, once the clock runs again, the page's own polls) read again.
        await cable.mend()
        await retry.click()
        await page.clock.resume()
        await expect(status).to_be_hidden(timeout=30_000)
        await expect(_card(page)[1]).to_have_text("On time")
    finally:
        await page.close()
        await app.stop()
        if cable.server is not None:
            cable.server.close()


async def test_an_admin_makes_a_scorer_account_and_signs_a_lost_tablet_out(
    console: Console,
) -> None:
    accounts = console.app.accounts
    page = await console.page("ada")
    try:
        await page.get_by_role("link", name="Accounts").click()
        await expect(page.get_by_role("heading", name="Accounts")).to_be_visible()
        new = page.locator("#new-account")
        await new.get_by_label("Login").fill("court3")
        await new.get_by_label("Name").fill("Court 3 tablet")
        await new.get_by_label("Role").select_option("scorer")
        await new.get_by_label("Password", exact=True).fill(PASSWORD)
        await new.get_by_label("Password again").fill(PASSWORD + "x")
        await new.get_by_role("button", name="Make the account").click()
        # Two different passwords: nothing made, the form keeps what was typed but them.
        await expect(page.locator("#accounts-error")).to_contain_text("the two passwords differ")
        await expect(new.get_by_label("Login")).to_have_value("court3")
        await new.get_by_label("Password", exact=True).fill(PASSWORD)
        await new.get_by_label("Password again").fill(PASSWORD)
        await new.get_by_role("button", name="Make the account").click()
        await expect(page.get_by_role("status")).to_have_text("Made the scorer account court3.")
        row = page.locator('[data-account="court3"]')
        await expect(row).to_contain_text("Court 3 tablet")

        # The tablet signs in twice (the scorer console's sign-in), then goes missing.
        for _ in range(2):
            await accounts.sign_in("court3", PASSWORD, screen="scorer-console")
        await page.reload()
        await expect(row.locator("[data-sessions]")).to_contain_text("2 open")
        await row.get_by_role("button", name="Sign court3 out everywhere").click()
        await expect(page.get_by_role("status")).to_contain_text("2 sessions ended")
        await expect(row.locator("[data-sessions]")).to_contain_text("0 open")

        await row.get_by_role("button", name="Turn court3 off").click()
        await expect(page.get_by_role("status")).to_contain_text("Turned court3 off")
        await expect(row.locator("[data-sign-in]")).to_contain_text("Off")
        await expect(row.locator("[data-last-change]")).to_contain_text("off by Ada Admin")
        with pytest.raises(SignInRefused):
            await accounts.sign_in("court3", PASSWORD, screen="scorer-console")
        await console.shot(page, "accounts")
        await row.get_by_role("button", name="Turn court3 on").click()
        await expect(row.locator("[data-sign-in]")).not_to_contain_text("Off")

        # A new password, and a role: the scorer becomes an operator with its new password.
        await row.get_by_label("New password for court3", exact=True).fill(PASSWORD + " 2")
        await row.get_by_label("Again", exact=True).fill(PASSWORD + " 2")
        await row.get_by_role("button", name="Set the new password for court3").click()
        await expect(page.get_by_role("status")).to_contain_text("Set a new password for court3")
        await row.get_by_label("Role of court3", exact=True).select_option("operator")
        await row.get_by_role("button", name="Change the role of court3").click()
        await expect(page.get_by_role("status")).to_have_text("court3 is now an operator.")
        signed = await accounts.sign_in("court3", PASSWORD + " 2", screen="admin")
        assert signed.account.role == "operator"

        # Your own account cannot be turned off or demoted from here.
        mine = page.locator('[data-account="ada"]')
        await expect(mine.get_by_role("button", name="Turn ada off")).to_have_count(0)
        status = await page.evaluate(
            """async () => {
                const token = document.querySelector('input[name=csrf_token]').value;
                const body = new URLSearchParams({csrf_token: token});
                return (await fetch('/accounts/ada/off', {method: 'POST', body})).status;
            }"""
        )
        assert status == 400
    finally:
        await page.close()
    views = {v.login: v for v in await accounts.overview()}
    assert not views["ada"].disabled and views["court3"].role == "operator"


async def test_an_operator_gives_a_scorer_a_match_and_a_venue_day_and_hands_one_over(
    console: Console,
) -> None:
    db = console.day.db
    units = await db.fetch(
        "SELECT u.id::text AS id, u.code, u.name, u.venue, "
        "       (u.start_at AT TIME ZONE e.time_zone)::date::text AS day "
        "  FROM unit u JOIN event e ON e.id = u.event_id "
        " WHERE u.venue IS NOT NULL AND u.start_at IS NOT NULL ORDER BY u.start_at, u.code LIMIT 2"
    )
    first, second = units
    await console.app.accounts.create("ben", "Ben Ode", "scorer", PASSWORD)
    page = await console.page("ana")
    try:
        await page.get_by_role("link", name="Scorers").click()
        await expect(page.get_by_role("heading", name="Scorers", exact=True)).to_be_visible()
        await expect(page.locator("[data-assignment=on]")).to_be_visible()
        form = page.locator("#assign-form")
        # A unit code that is not there: nothing written, the form keeps what was typed.
        await form.get_by_label("Scorer", exact=True).select_option("sam")
        await form.get_by_label("Match: its unit code").fill("NOSUCHUNIT")
        await form.get_by_role("button", name="Assign").click()
        await expect(page.locator("#scorers-error")).to_contain_text(
            "Nothing was changed: unit: AG2026 has no unit 'NOSUCHUNIT'"
        )
        await expect(form.get_by_label("Match: its unit code")).to_have_value("NOSUCHUNIT")
        await form.get_by_label("Match: its unit code").fill(first["code"])
        await form.get_by_role("button", name="Assign").click()
        await expect(page.get_by_role("status")).to_have_text(
            f"Sam Scorer (sam) scores {first['name']}."
        )
        await form.get_by_label("Scorer", exact=True).select_option("sam")
        await form.get_by_label("Venue").fill(second["venue"])
        await form.get_by_label("Day").fill(second["day"])
        await form.get_by_role("button", name="Assign").click()
        await expect(page.get_by_role("status")).to_have_text(
            f"Sam Scorer (sam) scores {second['venue']} on {second['day']}."
        )
        # Handed over mid-Games: Ben alone scores the first match now.
        await form.get_by_label("Scorer", exact=True).select_option("ben")
        await form.get_by_label("Match: its unit code").fill(first["code"])
        await form.get_by_label("Hand over").check()
        await form.get_by_role("button", name="Assign").click()
        await expect(page.get_by_role("status")).to_have_text(
            f"Ben Ode (ben) scores {first['name']}; handed over from 1 other scorer(s)."
        )
        rows = page.locator("table.assignments tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0)).to_contain_text("Ben Ode")
        await expect(rows.nth(0)).to_contain_text(first["code"])
        await expect(rows.nth(1)).to_contain_text(f"{second['venue']} · {second['day']}")
        await console.shot(page, "scorers")
        await rows.nth(1).get_by_role("button").click()
        await expect(page.get_by_role("status")).to_have_text(
            f"sam no longer scores {second['venue']} on {second['day']}."
        )
        await expect(rows).to_have_count(1)
    finally:
        await page.close()
    assigned = await db.fetch(
        "SELECT a.login, s.unit_id::text, s.assigned_by FROM scorer_assignment s "
        "JOIN account a ON a.id = s.account_id"
    )
    assert [tuple(r) for r in assigned] == [("ben", first["id"], "Ana Operator")]
    changes = await db.fetch(
        "SELECT login, change, by_name FROM account_change "
        "WHERE change LIKE 'assigned%' OR change LIKE 'unassigned%' ORDER BY id"
    )
    assert [tuple(c) for c in changes] == [
        ("sam", f"assigned {first['code']}", "Ana Operator"),
        ("sam", f"assigned {second['venue']} on {second['day']}", "Ana Operator"),
        ("ben", f"assigned {first['code']}", "Ana Operator"),
        ("sam", f"unassigned {second['venue']} on {second['day']}", "Ana Operator"),
    ]
    # Viewers read the other screens, but who scores what is for operators and admins.
    page = await console.page("vic")
    try:
        await expect(page.get_by_role("link", name="Scorers")).to_have_count(0)
        await page.goto(f"{console.url}/scorers")
        await expect(page.get_by_role("heading", name="Only for operators")).to_be_visible()
    finally:
        await page.close()


async def test_accounts_are_for_admins_only(console: Console) -> None:
    page = await console.page("ana")
    try:
        await expect(page.get_by_role("link", name="Accounts")).to_have_count(0)
        await page.goto(f"{console.url}/accounts")
        await expect(page.get_by_role("heading", name="Only for admins")).to_be_visible()
        await expect(page.locator("main")).to_contain_text("Your account is an operator")
    finally:
        await page.close()


async def test_an_admin_makes_a_client_key_the_gateway_takes_and_turns_it_off(
    console: Console, servers: Servers
) -> None:
    async with running_gateway(
        console.day.database_url,
        servers.redis_url,
        gateway_anonymous_reads=False,
        gateway_keys_reload_seconds=0.2,
    ) as gw:
        page = await console.page("ada")
        try:
            await page.get_by_role("link", name="API keys").click()
            form = page.locator("#make-key")
            await form.get_by_label("Client").fill("dailyhunt")
            await form.get_by_label("Requests a second").fill("fast")
            await form.get_by_role("button", name="Make the key").click()
            await expect(page.locator("#keys-error")).to_contain_text("'fast' is not a number")
            await form.get_by_label("Requests a second").fill("50")
            await form.get_by_label("Burst").fill("200")
            await form.get_by_role("button", name="Make the key").click()
            shown = page.locator("#new-key [data-key]")
            await expect(shown).to_be_visible()
            key = (await shown.text_content() or "").strip()
            assert len(key) >= 24
            row = page.locator('[data-key-name="dailyhunt"]')
            await expect(row).to_contain_text("50 a second, bursts of 200")
            await expect(row).to_contain_text("by Ada Admin")
            await console.shot(page, "api-keys")
            # The gateway lets it in without a restart, and refuses it once it is off.
            await eventually(lambda: _answers(gw, key, 200), what="the new key let in")
            await row.get_by_role("button", name="Turn the key dailyhunt off").click()
            await expect(page.get_by_role("status")).to_contain_text("Turned the key dailyhunt off")
            await expect(row.locator("[data-state]")).to_contain_text("Off")
            await eventually(lambda: _answers(gw, key, 401), what="the key refused")
            # Shown once: a reload shows the list, never the key.
            await page.reload()
            assert key not in await page.content()
        finally:
            await page.close()
    stored = await console.day.db.fetchval("SELECT key_hash FROM api_key WHERE name = 'dailyhunt'")
    assert stored == hash_key(key)


async def _answers(gw: RunningGateway, key: str, status: int) -> bool:
    return bool((await gw.get("/v1/events", headers={"X-API-Key": key})).status_code == status)
