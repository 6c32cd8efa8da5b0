"""Start the delivery service: `python -m omnium_delivery` (runs at a lower CPU priority).

`python -m omnium_delivery load-clients FILE` adds or updates the clients a JSON file lists.
"""

from __future__ import annotations

import logging
import sys

import asyncpg

from omnium_db import init_connection
from omnium_delivery import ClientSettingsError, DeliveryApp, load_clients, read_clients_file
from omnium_process import run_process, wait_for_signal
from omnium_settings import Settings


async def main(settings: Settings) -> None:
    # asyncssh logs every connection step at INFO: noise for a service that keeps connections.
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    app = DeliveryApp(settings)
    try:
        await app.start()
        await wait_for_signal()
    except ClientSettingsError as exc:
        print(f"delivery: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        await app.stop()


def _load(path: str) -> None:
    async def load(settings: Settings) -> None:
        conn = await asyncpg.connect(settings.require_database_url())
        await init_connection(conn)
        try:
            codes = await load_clients(conn, read_clients_file(path), settings)
        except ClientSettingsError as exc:
            print(f"delivery: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        finally:
            await conn.close()
        print(f"delivery: clients {', '.join(codes)} loaded from {path}")

    run_process("delivery-load", load)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "load-clients":
        _load(sys.argv[2])
    else:
        run_process(
            "delivery",
            main,
            nice=lambda settings: settings.delivery.nice,
            metrics_port=lambda settings: settings.delivery.metrics_port,
        )
