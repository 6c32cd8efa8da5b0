"""Start the operators' console: `python -m omnium_admin` (HTTP on admin_port)."""

from __future__ import annotations

from omnium_admin import AdminApp
from omnium_process import run_process, wait_for_signal
from omnium_settings import Settings


async def main(settings: Settings) -> None:
    app = AdminApp(settings)
    try:
        await app.start()
        await wait_for_signal()
    finally:
        await app.stop()


if __name__ == "__main__":
    run_process("admin", main, metrics_port=lambda s: s.admin.metrics_port)
