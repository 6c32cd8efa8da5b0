"""One page of the console in a real browser, the same few verbs on Chromium and on WebKitGTK.

Chromium is driven by Playwright; WebKitGTK (Safari's engine, which D10 certifies on an iPad) by
plain WebDriver over HTTP: Debian's `WebKitWebDriver` starts its MiniBrowser on an Xvfb display.
The scenarios are written once against `Screen` and run on both.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx
from playwright.async_api import BrowserContext, Page

from tests.support.waiting import eventually

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the WebDriver spec's key for an element


class Screen(Protocol):
    """What a scenario does to a page, whatever the engine."""

    engine: str

    async def goto(self, url: str) -> None: ...
    async def fill(self, selector: str, value: str) -> None: ...
    async def tap(self, selector: str) -> None: ...
    async def evaluate(self, expression: str) -> Any: ...
    async def reload(self) -> None: ...
    async def screenshot(self, path: Path) -> None: ...
    async def set_offline(self, offline: bool) -> None: ...


def text(screen: Screen, selector: str) -> Callable[[], Awaitable[Any]]:
    return lambda: screen.evaluate(f"document.querySelector({selector!r})?.textContent ?? null")


def attribute(screen: Screen, selector: str, name: str) -> Callable[[], Awaitable[Any]]:
    return lambda: screen.evaluate(
        f"document.querySelector({selector!r})?.getAttribute({name!r}) ?? null"
    )


class PlaywrightScreen:
    """A Chromium page; taps are touch taps when the context has a touch screen."""

    engine = "chromium"

    def __init__(self, context: BrowserContext, page: Page, touch: bool) -> None:
        self.context = context
        self.page = page
        self._touch = touch

    async def goto(self, url: str) -> None:
        await self.page.goto(url)

    async def fill(self, selector: str, value: str) -> None:
        await self.page.fill(selector, value)

    async def tap(self, selector: str) -> None:
        if self._touch:
            await self.page.tap(selector)
        else:
            await self.page.click(selector)

    async def evaluate(self, expression: str) -> Any:
        return await self.page.evaluate(expression)

    async def reload(self) -> None:
        await self.page.reload()

    async def screenshot(self, path: Path) -> None:
        await self.page.screenshot(path=str(path), full_page=True)

    async def set_offline(self, offline: bool) -> None:
        await self.context.set_offline(offline)


class WebKitScreen:
    """A WebDriver session on WebKitGTK's MiniBrowser (an ephemeral session: see the README)."""

    engine = "webkitgtk"

    def __init__(self, client: httpx.AsyncClient, session: str) -> None:
        self._client = client
        self._session = session

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = await self._client.request(method, f"/session/{self._session}{path}", json=body)
        value = response.json()["value"]
        if response.status_code != 200:
            raise AssertionError(f"WebDriver {method} {path}: {value}")
        return value

    async def _element(self, selector: str) -> str:
        found = await self._call("POST", "/element", {"using": "css selector", "value": selector})
        return str(found[ELEMENT])

    async def goto(self, url: str) -> None:
        await self._call("POST", "/url", {"url": url})

    async def fill(self, selector: str, value: str) -> None:
        element = await self._element(selector)
        await self._call("POST", f"/element/{element}/clear", {})
        await self._call("POST", f"/element/{element}/value", {"text": value})

    async def tap(self, selector: str) -> None:
        await self._call("POST", f"/element/{await self._element(selector)}/click", {})

    async def evaluate(self, expression: str) -> Any:
        script = f"return ({expression});"
        return await self._call("POST", "/execute/sync", {"script": script, "args": []})

    async def reload(self) -> None:
        await self._call("POST", "/refresh", {})

    async def screenshot(self, path: Path) -> None:
        png = base64.b64decode(await self._call("GET", "/screenshot"))
        await asyncio.to_thread(path.write_bytes, png)

    async def set_offline(self, offline: bool) -> None:
        # WebDriver has no network emulation: navigator.onLine stays true, and the console
        # learns the network is gone only when a request fails (the venue's Wi-Fi is cut).
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


@asynccontextmanager
async def running_webkit(width: int = 1024, height: int = 768) -> AsyncIterator[WebKitScreen]:
    """Xvfb, WebKitWebDriver on it, and one MiniBrowser session; all stopped at the end."""
    read_end, write_end = os.pipe()
    # Xvfb picks a free display and writes its number to the pipe once it is ready.
    xvfb = await asyncio.create_subprocess_exec(
        "Xvfb", "-displayfd", str(write_end), "-screen", "0", f"{width}x{height}x24",
        "-nolisten", "tcp",
        pass_fds=(write_end,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_end)
    driver: asyncio.subprocess.Process | None = None
    try:
        with os.fdopen(read_end) as displayfd:
            display = await asyncio.to_thread(displayfd.readline)
        port = _free_port()
        driver = await asyncio.create_subprocess_exec(
            "WebKitWebDriver",
            f"--port={port}",
            env={**os.environ, "DISPLAY": f":{display.strip()}"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:

            async def ready() -> bool:
                return bool((await client.get("/status")).json()["value"]["ready"])

            await eventually(ready, within=10, ignoring=(httpx.TransportError,), what="the driver")
            made = await client.post("/session", json={"capabilities": {"alwaysMatch": {}}})
            session = made.json()["value"]["sessionId"]
            try:
                await client.post(
                    f"/session/{session}/window/rect", json={"width": width, "height": height}
                )
                # A find waits up to 5 s for its element, as Playwright's does: a sheet drawn on
                # a tap may not be in the page yet when the next step looks for it.
                await client.post(f"/session/{session}/timeouts", json={"implicit": 5000})
                yield WebKitScreen(client, session)
            finally:
                await client.delete(f"/session/{session}")
    finally:
        if driver is not None:
            await _stop(driver)
        await _stop(xvfb)
