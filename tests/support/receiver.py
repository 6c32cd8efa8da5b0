"""A real HTTP webhook receiver for the tests: checks the Standard Webhooks signature."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(slots=True)
class Received:
    headers: dict[str, str]
    body: bytes
    signature_ok: bool

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(slots=True)
class Receiver:
    url: str
    secret: str
    got: list[Received] = field(default_factory=list)
    status: int = 200
    # Seconds the receiver takes to answer: a slow client.
    delay: float = 0.0


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Written from the Standard Webhooks text, not from omnium's code."""
    if "webhook-signature" not in headers:
        return False
    key = base64.b64decode(secret.split("_", 1)[1])
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [part.split(",", 1)[1] for part in headers["webhook-signature"].split()]
    return any(hmac.compare_digest(expected, sig) for sig in given)


@asynccontextmanager
async def webhook_receiver(
    secret: str = "whsec_" + base64.b64encode(b"k" * 24).decode(),
) -> AsyncIterator[Receiver]:
    receiver = Receiver("", secret)

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if receiver.delay:
            await asyncio.sleep(receiver.delay)
        receiver.got.append(Received(headers, body, verify(secret, headers, body)))
        return web.Response(status=receiver.status)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()
