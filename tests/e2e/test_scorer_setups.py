"""The scorer console on D10's certified setups: a laptop, an Android phone and an iPad in
Chromium (device metrics, touch, mobile user agent; portrait and landscape), and WebKitGTK for
Safari's engine.

WebKitGTK is not Safari (services/scoring/README.md, "Safari's engine, not Safari"): its WebDriver
session is ephemeral (what a page stores lasts as long as the session, like a private window),
it has no `navigator.storage` (so the console cannot ask it to keep data, and warns), and it does
not delete site data after 7 days without a visit as Safari does. Its service worker keeps the
page for offline reloads as Safari's does.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Browser, Playwright, async_playwright

from tests.conftest import REPO
from tests.support.games import make_games
from tests.support.lossy import lossy_network
from tests.support.scoring import ConsoleSite, running_console
from tests.support.screens import (
    PlaywrightScreen,
    Screen,
    WebKitScreen,
    attribute,
    running_webkit,
    text,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

SHOTS = REPO / "artifacts" / "screenshots"
PASSWORD = "a long password"
# Playwright's descriptors: viewport, device scale factor, touch, a mobile user agent.
SETUPS: dict[str, str | None] = {
    "chromium-desktop": None,
    "android-portrait": "Pixel 7",
    "android-landscape": "Pixel 7 landscape",
    "ipad-portrait": "iPad (gen 7)",
    "ipad-landscape": "iPad (gen 7) landscape",
    "webkitgtk": None,
}
SMALLEST_TARGET = 44  # CSS px: Apple's and WCAG's smallest comfortable touch target

# Every control a scorer touches, measured where it is drawn: big enough, on the screen, not
# covered (the sticky header), and the page never scrolls sideways.
LAYOUT = """(() => {
  const root = document.documentElement;
  const problems = [];
  if (root.scrollWidth > root.clientWidth) {
    problems.push(`the page scrolls sideways: ${root.scrollWidth} px wide in ${root.clientWidth}`);
  }
  const controls = document.querySelectorAll(
    "button, a[data-unit], .crumb a, .tools .ask, input:not([type=checkbox]), select, summary");
  for (const el of controls) {
    if (!el.getClientRects().length) continue;
    const name = el.id || (el.dataset.action ? `${el.dataset.action} ${el.dataset.side || ""}`
      : el.textContent.trim().slice(0, 24) || el.name);
    el.scrollIntoView({ block: "center", inline: "nearest" });
    const box = el.getBoundingClientRect();
    if (box.width < %(min)d || box.height < %(min)d) {
      problems.push(`${name}: ${Math.round(box.width)}x${Math.round(box.height)} px`);
    }
    if (box.left < 0 || box.right > root.clientWidth) problems.push(`${name}: off the screen`);
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    if (!hit || !(el === hit || el.contains(hit) || hit.contains(el))) {
      problems.push(`${name}: covered by ${hit ? hit.outerHTML.slice(0, 60) : "nothing"}`);
    }
  }
  window.scrollTo(0, 0);
  return problems;
})()""" % {"min": SMALLEST_TARGET}  # noqa: UP031


# The sheet a tap opens (a goal's details, "End period?"): its buttons big enough, apart, and
# on the screen.
SHEET = """((id) => {
  const problems = [];
  const sheet = document.getElementById(id);
  if (sheet.hidden) return [`${id} is not open`];
  const width = document.documentElement.clientWidth;
  const boxes = [...sheet.querySelectorAll(".sheet-actions button")]
    .map((b) => b.getBoundingClientRect());
  for (const box of boxes) {
    if (box.width < %(min)d || box.height < %(min)d) {
      problems.push(`${Math.round(box.width)}x${Math.round(box.height)} px`);
    }
    if (box.top < 0 || box.bottom > window.innerHeight || box.right > width) {
      problems.push("off the screen");
    }
  }
  if (boxes.length === 2 && boxes[1].left - boxes[0].right < 16) problems.push("the buttons touch");
  return problems;
})""" % {"min": SMALLEST_TARGET}  # noqa: UP031


@pytest.fixture(scope="module")
async def playwright() -> AsyncIterator[Playwright]:
    async with async_playwright() as p:
        yield p


@pytest.fixture(scope="module")
async def chromium(playwright: Playwright) -> AsyncIterator[Browser]:
    browser = await playwright.chromium.launch(
        executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
    )
    try:
        yield browser
    finally:
        await browser.close()


class WebKitOnDemand:
    """One MiniBrowser for the module, started when a test first asks: each test's site has its
    own origin, so its own data."""

    def __init__(self) -> None:
        self.stack = AsyncExitStack()
        self.screen: WebKitScreen | None = None

    async def get(self) -> WebKitScreen:
        if self.screen is None:
            self.screen = await self.stack.enter_async_context(running_webkit())
        return self.screen


@pytest.fixture(scope="module")
async def webkit() -> AsyncIterator[WebKitOnDemand]:
    on_demand = WebKitOnDemand()
    async with on_demand.stack:
        yield on_demand


@pytest.fixture
async def screen_for(
    playwright: Playwright, chromium: Browser, webkit: WebKitOnDemand
) -> AsyncIterator[Any]:
    @asynccontextmanager
    async def opened(setup: str) -> AsyncIterator[Screen]:
        if setup == "webkitgtk":
            yield await webkit.get()
            return
        device = SETUPS[setup]
        if device is None:
            options: dict[str, Any] = {"viewport": {"width": 1280, "height": 800}}
        else:
            options = dict(playwright.devices[device])
            options.pop("default_browser_type")
        context = await chromium.new_context(**options)
        try:
            page = await context.new_page()
            yield PlaywrightScreen(context, page, touch=bool(options.get("has_touch")))
        finally:
            await context.close()

    yield opened


async def look(screen: Screen, setup: str, view: str) -> None:
    """A screenshot to look at (artifacts/screenshots), and the layout's rules checked."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems = await screen.evaluate(LAYOUT)
    await screen.screenshot(SHOTS / f"scorer-{setup}-{view}.png")
    assert problems == [], f"{setup}, {view}: {problems}"


async def look_at_sheet(screen: Screen, setup: str, sheet: str) -> None:
    """The open sheet's screenshot, its buttons checked; then Cancel / Not yet (nothing kept)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems = await screen.evaluate(f"{SHEET}({sheet!r})")
    await screen.screenshot(SHOTS / f"scorer-{setup}-{sheet}.png")
    assert problems == [], f"{setup}, {sheet}: {problems}"
    await screen.tap(f"#{sheet} button.cancel")


async def sign_in_and_open(
    screen: Screen, site: ConsoleSite, unit: str, setup: str, url: str = ""
) -> None:
    await screen.goto(f"{url or site.url}/score/")
    await eventually(attribute(screen, "body", "data-ready"), "true", what="the page started")
    await look(screen, setup, "sign-in")
    await screen.fill('input[name="login"]', "mina")
    await screen.fill('input[name="password"]', PASSWORD)
    await screen.tap('#sign-in-form button[type="submit"]')
    link = f'a[data-unit="{unit}"]'
    found = f"document.querySelector({link!r}) !== null"
    await eventually(lambda: screen.evaluate(found), True, what="the match list")
    await look(screen, setup, "pick")
    await screen.tap(link)
    await eventually(
        lambda: screen.evaluate("document.querySelector('#buttons button') !== null"),
        True,
        what="the score buttons",
    )


# Football's [console]: a goal's details are asked on the tap (Save keeps the clock's minute),
# and a match event is asked about once.
ASKED = {"goal", "own_goal"}
CONFIRMED = {"end_period", "end_match"}


async def tap(screen: Screen, action: str, side: int | None = None) -> None:
    selector = f'#buttons button[data-action="{action}"]'
    if side is not None:
        selector += f'[data-side="{side}"]'
    await screen.tap(selector)
    if action in ASKED:
        await screen.tap('#details button[type="submit"]')
    elif action in CONFIRMED:
        await screen.tap('#confirm button[type="submit"]')


async def score_is(screen: Screen, one: int, two: int, within: float = 3.0) -> None:
    async def both() -> list[str]:
        got: list[str] = await screen.evaluate(
            "[1, 2].map((n) => document.getElementById(`score-${n}`)?.textContent)"
        )
        return got

    await eventually(both, [str(one), str(two)], within=within, what="the score")


async def waiting_is(screen: Screen, count: int, within: float = 5.0) -> None:
    await eventually(
        attribute(screen, "#waiting", "data-count"), str(count), within=within, what="waiting"
    )


async def status_ends(screen: Screen, words: str, within: float = 5.0) -> None:
    """The match's status line, as the server last gave it ("live · action 4")."""
    said = f"document.getElementById('status').textContent.endsWith({words!r})"
    await eventually(lambda: screen.evaluate(said), True, within=within, what=words)


@pytest.mark.parametrize("setup", list(SETUPS))
async def test_scoring_offline_with_an_undo_survives_a_reload_and_saves_once_in_order(
    setup: str, screen_for: Any, db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_console(database_url) as site, screen_for(setup) as screen:
        await site.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        await site.assign("mina", games.units)
        await sign_in_and_open(screen, site, unit, setup)
        await tap(screen, "start_period")
        await tap(screen, "goal", 1)
        await score_is(screen, 1, 0)
        await tap(screen, "goal", 1)
        await tap(screen, "goal", 2)
        await score_is(screen, 2, 1)
        await waiting_is(screen, 0)
        await status_ends(screen, "action 4")
        # The standing actions are read: an undo tapped offline is shown at once.
        await eventually(attribute(screen, "#undo", "data-predicted"), "true")
        await eventually(
            lambda: screen.evaluate("navigator.serviceWorker.controller !== null"),
            True,
            what="the service worker keeping the page",
        )
        await look(screen, setup, "score")
        await screen.tap('#buttons button[data-action="goal"][data-side="1"]')
        await look_at_sheet(screen, setup, "details")
        await screen.tap('#buttons button[data-action="end_period"]')
        await look_at_sheet(screen, setup, "confirm")

        site.wifi.cut()
        await screen.set_offline(True)
        await screen.tap("#undo")  # takes back the saved goal of side 2
        await score_is(screen, 2, 0)
        taps: list[tuple[str, int | None, tuple[int, int]]] = [
            ("goal", 1, (3, 0)), ("goal", 2, (3, 1)), ("goal", 2, (3, 2)),
            ("end_period", None, (3, 2)), ("start_period", None, (3, 2)),
            ("goal", 1, (4, 2)), ("goal", 2, (4, 3)), ("goal", 1, (5, 3)), ("goal", 2, (5, 4)),
        ]  # fmt: skip
        for action, side, (one, two) in taps:
            await tap(screen, action, side)
            await score_is(screen, one, two)  # shown at once: the server is out of reach
        await waiting_is(screen, 10)
        await eventually(attribute(screen, "#net", "data-online"), "false", what="offline shown")
        await look(screen, setup, "offline")

        await screen.reload()
        await eventually(attribute(screen, "body", "data-ready"), "true", what="reloaded")
        await waiting_is(screen, 10)
        await score_is(screen, 5, 4)
        assert await db.fetchval("SELECT count(*) FROM match_action") == 4

        site.wifi.restore()
        await screen.set_offline(False)
        await waiting_is(screen, 0, within=20)
        await status_ends(screen, "action 14", within=10)
        await score_is(screen, 5, 4)
    rows = await db.fetch(
        "SELECT seq, command_id, kind, side, undone_by FROM match_action ORDER BY seq"
    )
    assert [r["seq"] for r in rows] == list(range(1, 15))
    assert len({r["command_id"] for r in rows}) == 14, "each action saved once"
    counters = [int(r["command_id"].rsplit(":", 1)[1]) for r in rows]
    assert counters == sorted(counters), "saved in the order they were tapped"
    assert [(r["kind"], r["side"], r["undone_by"]) for r in rows] == [
        ("start_period", None, None), ("goal", 1, None), ("goal", 1, None), ("goal", 2, 5),
        ("undo", None, None), ("goal", 1, None), ("goal", 2, None), ("goal", 2, None),
        ("end_period", None, None), ("start_period", None, None), ("goal", 1, None),
        ("goal", 2, None), ("goal", 1, None), ("goal", 2, None),
    ]  # fmt: skip
    scores = await db.fetch(
        "SELECT score FROM unit_competitor WHERE unit_id = $1 ORDER BY sort_order", unit
    )
    assert [s["score"] for s in scores] == ["5", "4"]


async def warning_of(screen: Screen) -> dict[str, Any]:
    got: dict[str, Any] = await screen.evaluate(
        """(() => {
          const el = document.getElementById("storage-warning");
          return { shown: !el.hidden, reasons: el.dataset.reasons, words: el.textContent };
        })()"""
    )
    return got


async def warning_shown(screen: Screen) -> None:
    await eventually(
        lambda: screen.evaluate("!document.getElementById('storage-warning').hidden"),
        True,
        what="the warning",
    )


@pytest.mark.parametrize("setup", ["chromium-desktop", "webkitgtk"])
async def test_an_ephemeral_context_is_warned_and_told_what_waits_on_the_device(
    setup: str, screen_for: Any, db: asyncpg.Connection, database_url: str
) -> None:
    """Chromium's new context is incognito; WebKitGTK's WebDriver session is ephemeral."""
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_console(database_url) as site, screen_for(setup) as screen:
        await site.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        await site.assign("mina", games.units)
        await sign_in_and_open(screen, site, unit, f"{setup}-ephemeral")
        await warning_shown(screen)
        warning = await warning_of(screen)
        assert warning["reasons"] == "not-kept"
        assert "may delete actions before they are saved" in warning["words"]
        assert "a private or guest window when it closes" in warning["words"]
        assert "No actions are waiting on this device." in warning["words"]
        site.wifi.cut()
        await screen.set_offline(True)
        await tap(screen, "start_period")
        await tap(screen, "goal", 2)
        await tap(screen, "goal", 2)
        await score_is(screen, 0, 2)
        await eventually(
            text(screen, "#kept-here"), "3 actions are waiting on this device, not saved yet."
        )
        await screen.tap("#storage-warning summary")  # the headline opens to say more
        await look(screen, setup, "warning")
        site.wifi.restore()
        await screen.set_offline(False)
        await waiting_is(screen, 0, within=20)
        await eventually(text(screen, "#kept-here"), "No actions are waiting on this device.")


async def test_a_kept_profile_is_not_warned_and_a_small_one_is(
    playwright: Playwright, db: asyncpg.Connection, database_url: str
) -> None:
    """The same console in a Chromium profile on disk that was granted persistent storage: no
    warning (the grant, given as a user's engagement would). Then with little room left."""
    async with running_console(database_url) as site:
        await site.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        with tempfile.TemporaryDirectory() as profile:
            context = await playwright.chromium.launch_persistent_context(
                Path(profile), executable_path="/usr/bin/chromium", args=["--no-sandbox"],
                headless=True,
            )  # fmt: skip
            try:
                page = await context.new_page()
                cdp = await context.new_cdp_session(page)
                await cdp.send(
                    "Browser.grantPermissions",
                    {"permissions": ["durableStorage"], "origin": site.url},
                )
                screen = PlaywrightScreen(context, page, touch=False)
                await screen.goto(f"{site.url}/score/")
                await eventually(attribute(screen, "body", "data-ready"), "true")
                warning = await warning_of(screen)
                assert warning["shown"] is False, warning
                assert warning["reasons"] == ""

                # A browser that lets the page keep only 3 MB more (its estimate says so).
                await context.add_init_script(
                    "navigator.storage.estimate = async () => "
                    "({ quota: 4 * 1024 * 1024, usage: 1024 * 1024 });"
                )
                await screen.reload()
                await warning_shown(screen)
                warning = await warning_of(screen)
                assert warning["reasons"] == "small"
                assert "keep only 3.0 MB more on this device" in warning["words"]
            finally:
                await context.close()


@pytest.mark.parametrize("setup", ["android-portrait", "ipad-landscape", "webkitgtk"])
async def test_fifty_taps_over_a_slow_lossy_network_are_saved_once_in_order(
    setup: str, screen_for: Any, db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with (
        running_console(database_url) as site,
        lossy_network(site.url) as network,
        screen_for(setup) as screen,
    ):
        await site.accounts.create("mina", "Mina Park", "scorer", PASSWORD)
        await site.assign("mina", games.units)
        await sign_in_and_open(screen, site, unit, f"{setup}-lossy", url=network.url)
        await tap(screen, "start_period")
        await status_ends(screen, "action 1", within=20)
        # First the server takes its time with everything: each tap shows all the same.
        network.hold()
        sides = [1 + (n * 7 % 3 == 0) for n in range(50)]
        score = [0, 0]
        for n, side in enumerate(sides):
            if n == 10:
                network.release()
            await tap(screen, "goal", side)
            score[side - 1] += 1
            await score_is(screen, *score)
            if n == 9:
                assert await db.fetchval("SELECT count(*) FROM match_action") == 1
        await waiting_is(screen, 0, within=60)
        await score_is(screen, *score)
    assert network.lost_on_the_way >= 1 and network.answers_lost >= 1, network
    rows = await db.fetch("SELECT seq, command_id, kind, side FROM match_action ORDER BY seq")
    assert [r["seq"] for r in rows] == list(range(1, 52))
    assert len({r["command_id"] for r in rows}) == 51, "each tap saved once"
    counters = [int(r["command_id"].rsplit(":", 1)[1]) for r in rows]
    assert counters == sorted(counters), "saved in the order they were tapped"
    assert [r["side"] for r in rows[1:]] == sides
