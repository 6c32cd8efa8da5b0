"""Start the imports service: `python -m omnium_imports` (runs at a lower CPU priority)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from omnium_grpc import wait_for_signal
from omnium_imports import ImportsApp
from omnium_settings import Settings, SettingsError
from omnium_telemetry import setup_tracing, shutdown_tracing


async def main(settings: Settings) -> None:
    app = ImportsApp(settings)
    try:
        await app.start()
        await wait_for_signal()
    finally:
        await app.stop()


if __name__ == "__main__":
    try:
        settings = Settings.from_env()
        settings.require_database_url()
    except SettingsError as exc:
        print(f"imports: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Scout page is noise
    if settings.imports_nice > 0:
        # Scorers come first: a big import never competes with them for the CPU.
        os.nice(settings.imports_nice)
    setup_tracing("omnium-imports", settings)
    try:
        asyncio.run(main(settings))
    finally:
        shutdown_tracing()
