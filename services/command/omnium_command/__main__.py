"""Start the command service: `python -m omnium_command`."""

from __future__ import annotations

from omnium_command import CommandApp
from omnium_process import run_process, settle_after_start, wait_for_signal
from omnium_settings import Settings


async def main(settings: Settings) -> None:
    app = CommandApp(settings)
    try:
        await app.start()
        settle_after_start()
        await wait_for_signal()
    finally:
        await app.stop()


if __name__ == "__main__":
    run_process("command", main, metrics_port=lambda s: s.command.metrics_port)
