"""The operators' console in a browser, for the e2e tests: signed in as one of the accounts
the module's console was made with, and screenshots kept for people."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from playwright.async_api import Browser, Page, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from omnium_admin import AdminApp
from tests.conftest import REPO
from tests.support.imports import GamesDay

# Every account the module's console makes signs in with this password.
PASSWORD = "correct horse battery"


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
