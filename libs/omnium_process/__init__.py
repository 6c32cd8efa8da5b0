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

from omnium_settings import Settings, SettingsError
from omnium_telemetry import setup_tracing, shutdown_tracing

__all__ = ["run_process", "settle_after_start", "wait_for_signal"]


def run_process(
    name: str,
    main: Callable[[Settings], Coroutine[Any, Any, None]],
    *,
    nice: Callable[[Settings], int] | None = None,
    needs_database: bool = True,
) -> None:
    """The body of every service's __main__: a bad setting exits 2 with its message."""
    try:
        settings = Settings.from_env()
        if needs_database:
            settings.require_database_url()
    except SettingsError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(message)s")
    # httpx logs a line per request at INFO: noise in a service that reads Scout page by page.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    step = nice(settings) if nice is not None else 0
    if step > 0:
        # Lower priority for background work (imports, delivery): scorers get the CPU first.
        os.nice(step)
    setup_tracing(f"omnium-{name}", settings)
    try:
        asyncio.run(main(settings))
    finally:
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
