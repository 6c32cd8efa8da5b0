"""Starting an omnium process: settings, logging, CPU priority, tracing, run until stopped."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

from omnium_db import SchemaMismatch
from omnium_metrics import serve_metrics
from omnium_process._address import client_address, nearest_untrusted
from omnium_settings import Settings, SettingsError, deploy_problems
from omnium_telemetry import setup_logging, setup_tracing, shutdown_tracing

__all__ = [
    "client_address",
    "load_settings",
    "malformed_http_as_info",
    "nearest_untrusted",
    "run_process",
    "settle_after_start",
    "wait_for_signal",
]


def load_settings(name: str, *, needs_database: bool = True) -> Settings:
    """This process's settings; a bad setting, or in production any dev default still in force
    (one line each), exits 2 before anything starts."""
    try:
        settings = Settings.from_env()
        if needs_database:
            settings.require_database_url()
    except SettingsError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        sys.exit(2)
    if settings.server.environment == "production":
        problems = deploy_problems(settings)
        if problems:
            for problem in problems:
                print(f"{name}: refuses to start in production: {problem}", file=sys.stderr)
            print(
                f"{name}: {len(problems)} problem(s); `python -m omnium_process check --deploy` "
                "lists them. On a dev machine, set OMNIUM_ENVIRONMENT=development.",
                file=sys.stderr,
            )
            sys.exit(2)
    return settings


def run_process(
    name: str,
    main: Callable[[Settings], Coroutine[Any, Any, None]],
    *,
    nice: Callable[[Settings], int] | None = None,
    needs_database: bool = True,
    metrics_port: Callable[[Settings], int] | None = None,
) -> None:
    """The body of every service's __main__: a bad setting exits 2 with its message. With
    `metrics_port`, the process serves Prometheus text at that port's /metrics (0: none)."""
    settings = load_settings(name, needs_database=needs_database)
    setup_logging(name, settings)
    step = nice(settings) if nice is not None else 0
    if step > 0:
        # Lower priority for background work (imports, delivery): scorers get the CPU first.
        os.nice(step)
    setup_tracing(f"omnium-{name}", settings)
    served = None
    if metrics_port is not None:
        served = serve_metrics(name, settings.server.bind_host, metrics_port(settings))
    try:
        asyncio.run(main(settings))
    except SchemaMismatch as exc:
        # Not a crash to trace: the release's migration step has not run (or a newer one has).
        print(exc, file=sys.stderr)
        sys.exit(2)
    finally:
        if served is not None:
            served.close()
        shutdown_tracing()


def settle_after_start() -> None:
    """Call once a server is up: what start-up made lives as long as the process, so keep it out
    of every collection and collect less often; no call then waits on a pass over long-lived
    objects (the gateway's workers do the same)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


async def wait_for_signal(
    signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
) -> None:
    """Return when the process is asked to stop."""
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    for sig in signals:
        loop.add_signal_handler(sig, stopped.set)
    try:
        await stopped.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


class _MalformedHttpAsInfo(logging.Filter):
    """aiohttp logs a request it cannot parse as an ERROR with a traceback ("Error handling
    request"). It is the client's mistake, already answered 400: one INFO line says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "refused a malformed HTTP request with %s: %s"
            # aiohttp's message spans lines (the bad bytes, then a caret under the fault).
            parts = (part.strip() for part in str(exc.message).splitlines())
            record.args = (exc.code or 400, " ".join(p for p in parts if p and p != "^"))
            record.exc_info, record.exc_text = None, None
        return True


_MALFORMED = _MalformedHttpAsInfo()


def malformed_http_as_info() -> None:
    """Call in a process that serves HTTP with aiohttp (once or more: it is added once)."""
    logging.getLogger("aiohttp.server").addFilter(_MALFORMED)
