"""Start scoring: `python -m omnium_scoring`; `python -m omnium_scoring pull` reads providers."""

from __future__ import annotations

import asyncio
import sys

from omnium_process import run_process, settle_after_start, wait_for_signal
from omnium_scoring import ScoringApp
from omnium_settings import Settings


async def main(settings: Settings) -> None:
    app = ScoringApp(settings)
    try:
        await app.start()
        settle_after_start()
        await wait_for_signal()
    finally:
        await app.stop()


async def pull(settings: Settings) -> None:
    """The pull providers, read at their intervals in a process below scoring's priority."""
    app = ScoringApp(settings)
    try:
        providers = await app.prepare()
        task = asyncio.create_task(providers.pull_forever())
        await wait_for_signal()
        task.cancel()
    finally:
        await app.stop()


if __name__ == "__main__":
    if sys.argv[1:] == ["pull"]:
        run_process("scoring-pull", pull, nice=lambda s: s.scoring.provider_nice)
    else:
        run_process(
            "scoring",
            main,
            nice=lambda s: s.scoring.nice,
            metrics_port=lambda s: s.scoring.metrics_port,
        )
