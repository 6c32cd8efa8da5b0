"""A venue's Wi-Fi between the browser and the site: a real TCP hop a test can cut and restore.

Chromium's offline emulation (`context.set_offline`) does not reach requests that go through a
service worker (playwright#2311): a page reloaded "offline" can still reach the server, so a
test that only emulates offline can see taps saved that it meant to keep on the device. Cutting
this hop takes the network away from every request the browser makes, page and worker alike:
open connections are reset and new ones refused, as when the venue's access point goes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class VenueWifi:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._down = False
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def cut(self) -> None:
        """The access point goes: every open connection is reset, and new ones too."""
        self._down = True
        for browser_side, site_side in list(self._links):
            browser_side.transport.abort()
            site_side.transport.abort()
        self._links.clear()

    def restore(self) -> None:
        self._down = False

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            writer.transport.abort()
            return
        try:
            site_reader, site_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        link = (writer, site_writer)
        self._links.add(link)
        both = [
            asyncio.ensure_future(self._pipe(reader, site_writer)),
            asyncio.ensure_future(self._pipe(site_reader, writer)),
        ]
        for task in both:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.gather(*both, return_exceptions=True)
        self._links.discard(link)
        for side in link:
            side.transport.abort()

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await source.read(65536):
                sink.write(chunk)
                await sink.drain()
        # One side finished: the other hears of it, as over a real network.
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()


@contextlib.asynccontextmanager
async def venue_wifi(host: str, port: int) -> AsyncIterator[VenueWifi]:
    wifi = VenueWifi(host, port)
    await wifi.start()
    try:
        yield wifi
    finally:
        await wifi.stop()
