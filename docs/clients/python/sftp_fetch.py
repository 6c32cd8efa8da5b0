"""Fetch the files omnium delivered to your SFTP folder, the host's key pinned.

    OMNIUM_SFTP_KEY=../../.omnium/dev/sftp-keys/client_key \
    OMNIUM_SFTP_HOST_KEY="ssh-ed25519 AAAA..." python sftp_fetch.py

Each file is replaced whole when omnium sends a new version (written aside, then renamed), so
a file read is never half written.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncssh

HOST = os.environ.get("OMNIUM_SFTP_HOST", "127.0.0.1")
PORT = int(os.environ.get("OMNIUM_SFTP_PORT", "8022"))
USER = os.environ.get("OMNIUM_SFTP_USER", "ndtv")
FOLDER = os.environ.get("OMNIUM_SFTP_FOLDER", ".")
TARGET = Path(os.environ.get("OMNIUM_SFTP_DIR", "omnium-files"))


async def fetch() -> list[str]:
    """Download every file in FOLDER into TARGET; their names."""
    known_hosts = asyncssh.import_known_hosts(
        f"[{HOST}]:{PORT} {os.environ['OMNIUM_SFTP_HOST_KEY']}\n"
    )
    async with (
        asyncssh.connect(
            HOST,
            PORT,
            username=USER,
            client_keys=[os.environ["OMNIUM_SFTP_KEY"]],
            known_hosts=known_hosts,
        ) as conn,
        conn.start_sftp_client() as sftp,
    ):
        names = sorted(n for n in await sftp.listdir(FOLDER) if not n.startswith("."))
        for name in names:
            await sftp.get(f"{FOLDER}/{name}", str(TARGET / name))
    return names


def main() -> int:
    TARGET.mkdir(parents=True, exist_ok=True)
    for name in asyncio.run(fetch()):
        print(f"{name}  {(TARGET / name).stat().st_size} bytes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
