"""The purge hook: the relay's groups sent as xkey-purge, tried again on failure, sent twice."""

from __future__ import annotations

import asyncio
import contextlib
import time

from aiohttp import web

from omnium_gateway._metrics import Metrics
from omnium_gateway._purge import GROUPS_PER_PURGE, SharedCachePurge
from omnium_settings import Settings
from tests.support.waiting import eventually


async def test_purges_retry_after_a_failure_and_repeat_once() -> None:
    received: list[tuple[float, str, str]] = []
    refuse = [True]

    async def purge(request: web.Request) -> web.Response:
        received.append((time.monotonic(), request.method, request.headers["xkey-purge"]))
        if refuse[0]:
            refuse[0] = False
            return web.Response(status=503)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("PURGE", "/", purge)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    settings = Settings.from_env(
        {},
        gateway_purge_urls=(f"http://127.0.0.1:{port}/",),
        gateway_purge_repeat_seconds=0.3,
    )
    metrics = Metrics()
    purger = SharedCachePurge(settings, metrics)
    task = asyncio.create_task(purger.run())
    try:
        groups = [f"unit:AG2026:U{n:03d}" for n in range(GROUPS_PER_PURGE + 5)]
        asked = time.monotonic()
        purger.request(["schedule:AG2026", *groups])
        # Refused, two chunks, both again.
        await eventually(lambda: len(received) >= 5, within=10, every=0.02, what="five purges")
        await asyncio.sleep(0.5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await runner.cleanup()
    assert [method for _, method, _ in received] == ["PURGE"] * 5
    refused, *taken = received
    assert refused[0] - asked < 0.5
    sent = [set(keys.split(" ")) for _, _, keys in taken]
    every = {"schedule:AG2026", *groups}
    assert sent[0] | sent[1] == every and sent[2] | sent[3] == every
    assert max(len(s) for s in sent) == GROUPS_PER_PURGE
    # Tried again about a second after the refusal; repeated once, the repeat time later.
    assert 0.8 < taken[0][0] - refused[0] < 2.0
    assert 0.25 < taken[2][0] - taken[1][0] < 1.0
    assert metrics.value("omnium_gateway_purge_errors_total") == 1
    assert metrics.value("omnium_gateway_purges_total") == 2 * len(every)
    assert purger.due[f"http://127.0.0.1:{port}/"] == {}
