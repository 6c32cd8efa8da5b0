"""The operators' console in headless Chromium against the real stack: command, imports, the
Scout simulator and the console itself. One stack for the module; the tests run in order."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest
from playwright.async_api import Page, expect

from omnium_admin import AdminApp
from omnium_admin._auth import PUBLIC
from tests.support.admin_console import PASSWORD, Console
from tests.support.imports import SCHEDULE, GamesDay
from tests.support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

MEDALS = "scout-medals"


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
    await expect(page.locator("#sign-in-error")).to_contain_text(re.compile(r"\d+ (s|min)"))
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
    page.once("dialog", lambda dialog: dialog.accept())  # "Turn off ...?" asks first
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
    found = await eventually(
        lambda: day.db.fetchval(
            "SELECT id::text FROM integration_run WHERE scout_run_id = $1", scout_run_id
        ),
        within=30,
        what=f"a run of {scout_run_id}",
    )
    return str(found)


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
    # Named by the match, Scout's key one click away.
    await expect(changed.locator("[data-key]", has_text=unit["externalId"])).to_have_count(1)
    await changed.get_by_role("link", name=unit["unitName"]).click()
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
    await page.get_by_role("navigation").get_by_role("link", name="Waiting for you").click()
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
    page.once("dialog", lambda dialog: dialog.accept())  # "Cancel the unit ...?" asks first
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
    await (
        page.get_by_role("navigation", name="Screens")
        .get_by_role("link", name="Waiting for you")
        .click()
    )
    guard = page.locator("article.item", has_text="Scout sent 100 rows")
    await console.shot(page, "waiting-guard")
    await guard.get_by_role("button", name="Start").click()
    await expect(page.get_by_role("status")).to_contain_text("run started")
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
