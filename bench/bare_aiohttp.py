"""The ceiling for bench.gateway_api: aiohttp answering a constant body, same worker count."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from aiohttp import web

from omnium_gateway._server import reuse_port_socket


async def serve(port: int, body: bytes) -> None:
    async def constant(request: web.Request) -> web.Response:
        del request
        return web.Response(body=body, headers={"Content-Type": "application/json"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", constant)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    sock = reuse_port_socket("127.0.0.1", port)
    sock.listen(1024)
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--body-bytes", type=int, default=1000)
    args = parser.parse_args()
    body = b'{"pad":"' + b"x" * max(0, args.body_bytes - 10) + b'"}'
    holder = reuse_port_socket("127.0.0.1", args.port)
    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            asyncio.run(serve(args.port, body))
            os._exit(0)
        children.append(pid)
    print(f"bare aiohttp listening on http://127.0.0.1:{args.port}", flush=True)

    def stop(signum: int, frame: object) -> None:
        del signum, frame
        for child in children:
            os.kill(child, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for child in children:
        os.waitpid(child, 0)
    holder.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
