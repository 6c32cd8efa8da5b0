"""Start the command service: `python -m omnium_command`."""

from __future__ import annotations

import asyncio
import logging
import sys

from omnium_command import CommandApp
from omnium_grpc import wait_for_signal
from omnium_settings import Settings, SettingsError
from omnium_telemetry import setup_tracing, shutdown_tracing


async def main(settings: Settings) -> None:
    app = CommandApp(settings)
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
        print(f"command: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(message)s")
    setup_tracing("omnium-command", settings)
    try:
        asyncio.run(main(settings))
    finally:
        shutdown_tracing()
