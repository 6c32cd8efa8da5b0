"""The SSE side of the delivery benchmark, in its own process: the gateway's live routes (a plain
aiohttp app with omnium_live) and N listeners, each noting when every event reached it.

Prints "ready" once every listener is connected; on SIGTERM writes [[outbox id, time], ...] to
--out and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web

from omnium_live import add_live_routes


async def listen(url: str, seen: list[tuple[int, float]], ready: asyncio.Event) -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url) as response:
        ready.set()
        buffer = ""
        async for chunk in response.content.iter_any():
            arrived = time.time()
            buffer += chunk.decode()
            while "\n\n" in buffer:
                message, buffer = buffer.split("\n\n", 1)
                for line in message.split("\n"):
                    if line.startswith("data: ") and '"id"' in line:
                        seen.append((json.loads(line[6:])["id"], arrived))


async def main(args: argparse.Namespace) -> None:
    redis = aioredis.from_url(args.redis_url)
    app = web.Application()
    add_live_routes(app, redis, heartbeat_seconds=5)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    seen: list[tuple[int, float]] = []
    ready = [asyncio.Event() for _ in range(args.listeners)]
    url = f"http://127.0.0.1:{args.port}/v1/events/{args.event}/live"
    tasks = [asyncio.create_task(listen(url, seen, r)) for r in ready]
    await asyncio.gather(*(r.wait() for r in ready))
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.to_thread(Path(args.out).write_text, json.dumps(seen))
    await runner.cleanup()
    await redis.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--event", required=True)
    parser.add_argument("--listeners", type=int, default=50)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
