"""The public API's docs page in Debian's Chromium: `/` leads to it, Redoc renders every route
and webhook of the document the gateway serves, everything it loads comes from the gateway,
and its Content-Security-Policy refuses nothing it needs."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright

from omnium_gateway._route_sets import LiveRoutes
from tests.support.games import make_games
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.servers import Servers

# Where the page's picture goes when asked (OMNIUM_DOCS_SCREENSHOT); else the test's folder.
SCREENSHOT = "OMNIUM_DOCS_SCREENSHOT"
# Collected from before the page's first script: what the CSP refused.
WATCH_CSP = """
window.__refused = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__refused.push(e.violatedDirective + " " + e.blockedURI);
});
"""


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
        )
        try:
            yield chromium
        finally:
            await chromium.close()


def operations(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(method, path, summary) of every operation of the document."""
    return [
        (method, path, operation["summary"])
        for path, item in doc["paths"].items()
        for method, operation in item.items()
    ]


async def test_the_docs_page_lists_every_route_and_webhook(
    browser: Browser, database_url: str, servers: Servers, db: Any, tmp_path: Path
) -> None:
    await make_games(db, units=1)
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url))
    async with running_gateway(database_url, servers.redis_url, [live]) as gw:
        doc = (await gw.get("/v1/openapi.json")).json()
        page = await browser.new_page()
        await page.add_init_script(WATCH_CSP)
        loaded: list[str] = []
        page.on("requestfinished", lambda request: loaded.append(request.url))
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        await page.goto(gw.url + "/")
        assert page.url == gw.url + "/v1/docs"
        summaries = [summary for _, _, summary in operations(doc)]
        hooks = [item["post"]["summary"] for item in doc["webhooks"].values()]
        # Redoc renders once it has fetched and parsed the document.
        await page.wait_for_function(
            "(names) => names.every((n) => document.body.textContent.includes(n))",
            arg=[*summaries, *hooks],
            timeout=30_000,
        )
        menu = await page.eval_on_selector_all(
            "[role=menuitem]", "(items) => items.map((i) => i.textContent)"
        )
        text = await page.evaluate("document.body.textContent")
        shot = Path(os.environ.get(SCREENSHOT) or tmp_path / "docs.png")
        image = await page.screenshot(path=str(shot), full_page=False)
        refused = await page.evaluate("window.__refused")
        await page.close()
    # Every operation is in the menu, by its summary, and its path is on the page.
    for method, path, summary in operations(doc):
        assert any(summary in item for item in menu), f"{method} {path} is not in the menu"
        assert path in text, f"{method} {path}: its path is not on the page"
    for hook in hooks:
        assert any(hook in item for item in menu), f"webhook {hook!r} is not in the menu"
    assert "unit.changed" in text and "webhook-signature" in text
    # Nothing loaded from elsewhere (a CDN, web fonts); the CSP refused nothing the page needs:
    # only Redoc's "API docs by Redocly" badge, an image on Redocly's CDN.
    assert all(u.startswith((gw.url, "data:", "blob:")) for u in loaded), loaded
    assert gw.url + "/v1/docs/redoc.standalone.js" in loaded
    assert set(refused) <= {"img-src https://cdn.redoc.ly/redoc/logo-mini.svg"}, refused
    assert len(image) > 10_000
