"""Starting an omnium process: settings, logging, CPU priority, tracing, run until stopped."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from omnium_settings import Settings, SettingsError
from omnium_telemetry import setup_tracing, shutdown_tracing

if TYPE_CHECKING:  # httpx is loaded by the services that send alerts, not by every process
    import httpx

__all__ = ["post_alert", "run_process", "settle_after_start"]


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


async def post_alert(
    http: httpx.AsyncClient | None, settings: Settings, alert: dict[str, Any]
) -> bool:
    """POST a new alert to OMNIUM_ALERT_WEBHOOK_URL; True when the receiver took it.

    Nothing to send to (no URL, or no HTTP client) is False; so is a failure, which is logged:
    the alert stays open on the operators' screens either way."""
    url = settings.alert_webhook_url
    if not url or http is None:
        return False
    import httpx

    try:
        response = await http.post(url, json=alert, timeout=settings.alert_webhook_timeout_seconds)
    except httpx.HTTPError as exc:
        logging.getLogger(__name__).warning(
            "alert %s could not be sent to %s: %s", alert.get("alert"), url, exc
        )
        return False
    if response.status_code >= 300:
        logging.getLogger(__name__).warning(
            "alert %s: %s answered %s", alert.get("alert"), url, response.status_code
        )
        return False
    return True
