"""Start the imports service: `python -m omnium_imports` (runs at a lower CPU priority).

With a command it is the imports command line instead (`python -m omnium_imports --help`):
integrations, reference data, lookups and mappings from files (omnium_imports._cli).
"""

from __future__ import annotations

import sys

from omnium_imports import ImportsApp
from omnium_process import run_process, wait_for_signal
from omnium_settings import Settings


async def main(settings: Settings) -> None:
    app = ImportsApp(settings)
    try:
        await app.start()
        await wait_for_signal()
    finally:
        await app.stop()


if __name__ == "__main__":
    argv = sys.argv[1:]
    # No arguments is the service, exactly as every deployment starts it (Dockerfile,
    # deploy/kubernetes/base/imports.yaml, the dev stack's launcher); `serve` says so by name.
    if argv in ([], ["serve"]):
        run_process(
            "imports",
            main,
            nice=lambda settings: settings.imports.nice,
            metrics_port=lambda settings: settings.imports.metrics_port,
        )
    else:
        from omnium_imports._cli import main as command_line

        sys.exit(command_line(argv))
