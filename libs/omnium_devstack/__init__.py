"""Private PostgreSQL and Redis for development when no external servers are configured."""

from __future__ import annotations

from omnium_devstack.binaries import Binaries, MissingBinaries, PostgresBinaries, ensure_binaries
from omnium_devstack.stack import (
    PortInUse,
    PostgresServer,
    RedisServer,
    Stack,
    StackError,
    running_stack,
)

__all__ = [
    "Binaries",
    "MissingBinaries",
    "PortInUse",
    "PostgresBinaries",
    "PostgresServer",
    "RedisServer",
    "Stack",
    "StackError",
    "ensure_binaries",
    "running_stack",
]
