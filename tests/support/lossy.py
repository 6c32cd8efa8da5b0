"""A slow, lossy network between the browser and the site: an HTTP proxy a test puts in front.

Every request waits half the round trip on the way there and half on the way back; one in twenty
of the console's scoring calls fails: the 3rd of every 40 before it reaches the server (the
server never hears of it), the 7th after (the server did the work, the answer is lost).
Engine-neutral: any browser that can reach a URL goes through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import ClientSession, web
from multidict import CIMultiDict

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
# Sign-in and the page itself pass untouched: the scenarios are about taps, not about signing in.
LOSSY_PREFIXES = ("/score/api/sync", "/score/api/matches/")


@dataclass
class LossyNetwork:
    url: str
    round_trip: float
    requests: int = 0
    lost_on_the_way: int = 0
    answers_lost: int = 0
    open: asyncio.Event = field(default_factory=asyncio.Event)

    def hold(self) -> None:
        """Requests wait, unanswered, until `release()`: a server that takes its time."""
        self.open.clear()

    def release(self) -> None:
        self.open.set()


@asynccontextmanager
async def lossy_network(target: str, round_trip: float = 0.4) -> AsyncIterator[LossyNetwork]:
    network = LossyNetwork("", round_trip)
    network.release()
    session = ClientSession(auto_decompress=False)

    async def forward(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(round_trip / 2)
        await network.open.wait()
        lossy = request.path.startswith(LOSSY_PREFIXES)
        place = 0
        if lossy:
            network.requests += 1
            place = network.requests % 40
        if place == 3:
            network.lost_on_the_way += 1
            raise web.HTTPBadGateway(text="lost on the way")
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP
        )
        async with session.request(
            request.method,
            f"{target}{request.rel_url}",
            headers=headers,
            data=await request.read(),
            allow_redirects=False,
        ) as upstream:
            body = await upstream.read()
            answer = CIMultiDict(
                (k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP
            )
        if place == 7:
            network.answers_lost += 1
            raise web.HTTPGatewayTimeout(text="the answer was lost")
        await asyncio.sleep(round_trip / 2)
        return web.Response(status=upstream.status, headers=answer, body=body)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    network.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield network
    finally:
        network.release()
        await runner.cleanup()
        await session.close()
