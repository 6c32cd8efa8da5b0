"""Start the imports service: `python -m omnium_imports` (runs at a lower CPU priority)."""

from __future__ import annotations

from omnium_grpc import wait_for_signal
from omnium_imports import ImportsApp
from omnium_process import run_process
from omnium_settings import Settings


async def main(settings: Settings) -> None:
    app = ImportsApp(settings)
    try:
        await app.start()
        await wait_for_signal()
    finally:
        await app.stop()


if __name__ == "__main__":
    run_process("imports", main, nice=lambda settings: settings.imports_nice)
