"""Run the gateway as several worker processes sharing one port (SO_REUSEPORT)."""

from __future__ import annotations

import asyncio
import gc
import glob
import logging
import multiprocessing
import os
import queue
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue

from aiohttp import web
from prometheus_client.multiprocess import mark_process_dead

from omnium_gateway._app import GATEWAY, make_app
from omnium_gateway._gateway import RouteSet
from omnium_gateway._metrics import render_registry, use_files
from omnium_metrics import serve_metrics
from omnium_process import malformed_http_as_info
from omnium_settings import Settings
from omnium_telemetry import setup_tracing, shutdown_tracing

log = logging.getLogger(__name__)
# Past its grace, a stopping worker gets this to close its pools before it is killed.
CLOSE_SECONDS = 1.0


def reuse_port_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


async def run_worker(
    settings: Settings,
    port: int,
    route_sets: Sequence[RouteSet] = (),
    stop: asyncio.Event | None = None,
    ready: Callable[[], None] | None = None,
) -> None:
    """One worker: its own socket on the shared port, its own pool and cache."""
    sock = reuse_port_socket(settings.server.bind_host, port)
    sock.listen(1024)
    app = make_app(settings, route_sets=route_sets)
    # aiohttp waits this long for the requests in flight, then as long again for those it had
    # to cancel: both inside the grace. Live streams end at once (the app's on_shutdown).
    malformed_http_as_info()
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=settings.gateway.stop_grace_seconds / 2,
    )
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    # Everything made at start-up lives as long as the worker: keep it out of every collection,
    # and collect less often, so no request waits on a full pass over long-lived objects.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    if ready is not None:
        ready()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        # Not ready first, then no new connections, then the streams end and the reads finish.
        app[GATEWAY].stopping = True
        await runner.cleanup()


def _worker_main(
    settings: Settings,
    port: int,
    metrics_dir: str,
    route_sets: Sequence[RouteSet],
    started: Queue[int],
    index: int,
) -> None:
    # The parent handles Ctrl-C for the group; a worker stops on the SIGTERM the parent sends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    use_files(metrics_dir)
    setup_tracing("omnium-gateway", settings)
    try:
        asyncio.run(run_worker(settings, port, route_sets, ready=lambda: started.put(index)))
    finally:
        shutdown_tracing()


def serve(settings: Settings, port: int | None = None, route_sets: Sequence[RouteSet] = ()) -> None:
    """Start `gateway_workers` processes on one port, restart any that dies, stop on SIGTERM."""
    workers = max(1, settings.gateway.workers)
    # Held (bound, not listening) for the whole run: it keeps the port ours between restarts
    # and tells us the port when 0 was asked for.
    holder = reuse_port_socket(
        settings.server.bind_host, settings.gateway.port if port is None else port
    )
    chosen = holder.getsockname()[1]
    # Each worker writes its metrics to files here; the metrics port and every worker's
    # /metrics sum them. A worker that dies keeps its counts (its live gauges are dropped).
    metrics_dir = _fresh_metrics_dir(settings)
    # Its thread only waits on its socket and reads the files, holding no lock a worker needs,
    # so forking the workers beside it is safe; the workers never serve that socket.
    metrics_server = serve_metrics(
        "gateway",
        settings.server.bind_host,
        settings.gateway.metrics_port,
        render_registry(metrics_dir),
    )
    context = multiprocessing.get_context("fork")
    started: Queue[int] = context.Queue()
    stopping = False

    def start(index: int) -> BaseProcess:
        process = context.Process(
            target=_worker_main,
            args=(settings, chosen, metrics_dir, route_sets, started, index),
            name=f"gateway-worker-{index}",
            daemon=False,
        )
        process.start()
        return process

    def stop(signum: int, frame: object) -> None:
        del signum, frame
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    processes = [start(i) for i in range(workers)]
    # The address is announced only once every worker accepts connections on it.
    waiting = workers
    while waiting and not stopping:
        try:
            started.get(timeout=0.5)
            waiting -= 1
        except queue.Empty:
            dead = [p.exitcode for p in processes if p.exitcode is not None]
            if dead:
                stopping = True
                print(f"gateway: a worker exited while starting ({dead[0]})", file=sys.stderr)
    if not stopping:
        # One plain line on stdout: the dev stack, the tests and the bench read the port from it.
        print(
            f"gateway listening on http://{settings.server.bind_host}:{chosen} ({workers} workers)"
        )
        sys.stdout.flush()
    try:
        while not stopping:
            for index, process in enumerate(processes):
                process.join(timeout=0.2)
                if stopping:
                    break
                if process.exitcode is not None:
                    log.warning(
                        "gateway worker %d exited (%s); starting it again", index, process.exitcode
                    )
                    mark_process_dead(process.pid, metrics_dir)  # type: ignore[no-untyped-call]
                    processes[index] = start(index)
    finally:
        _stop_workers(processes, settings.gateway.stop_grace_seconds + CLOSE_SECONDS)
        holder.close()
        if metrics_server is not None:
            metrics_server.close()
        if not settings.gateway.metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _fresh_metrics_dir(settings: Settings) -> str:
    """The folder the workers' metrics files go to, emptied of an earlier gateway's."""
    metrics_dir = settings.gateway.metrics_dir or tempfile.mkdtemp(prefix="omnium-gateway-")
    os.makedirs(metrics_dir, exist_ok=True)
    for stale in glob.glob(os.path.join(metrics_dir, "*.db")):
        os.remove(stale)
    return metrics_dir


def _stop_workers(processes: list[BaseProcess], seconds: float) -> None:
    """SIGTERM to every worker; one still there after `seconds` is killed, so the whole gateway
    is gone before the launcher or Kubernetes would kill it."""
    for process in processes:
        if process.pid is not None and process.exitcode is None:
            os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + seconds
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
        if process.exitcode is None and process.pid is not None:
            os.kill(process.pid, signal.SIGKILL)
            process.join()
