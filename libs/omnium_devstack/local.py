"""For command lines run beside `make run`: the dev stack's database and gRPC token, when the
OMNIUM_* settings do not name others."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omnium_devstack.__main__ import DEFAULT_DATA_DIR, DEFAULT_PG_PORT, DEFAULT_REDIS_PORT
from omnium_devstack.stack import Stack
from omnium_settings import Settings


@contextmanager
def dev_database(settings: Settings) -> Iterator[str]:
    """OMNIUM_DATABASE_URL, or the dev stack's PostgreSQL (started for this call if it is down)."""
    if settings.server.database_url:
        yield settings.server.database_url
        return
    stack = Stack(DEFAULT_DATA_DIR, DEFAULT_PG_PORT, DEFAULT_REDIS_PORT, True)
    stack.start()
    try:
        # As `make run` does before anything reads it: the release's migration step.
        subprocess.run(
            [sys.executable, "-m", "omnium_db", "migrate"],
            env={**os.environ, "OMNIUM_DATABASE_URL": stack.database_url},
            stdout=sys.stderr,
            check=False,
        )
        yield stack.database_url
    finally:
        stack.stop(only_started=True)


def dev_grpc_token(settings: Settings, data_dir: Path | None = None) -> str | None:
    """OMNIUM_GRPC_TOKEN, or the token `make run` made for its services (beside its data)."""
    if settings.grpc.token:
        return settings.grpc.token
    path = (data_dir or DEFAULT_DATA_DIR) / "grpc-token"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
