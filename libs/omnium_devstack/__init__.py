"""Private PostgreSQL and Redis for development when no external servers are configured."""

from __future__ import annotations

from omnium_devstack.binaries import Binaries, MissingBinaries, PostgresBinaries, ensure_binaries
from omnium_devstack.postgres import PostgresServer
from omnium_devstack.redis import RedisServer
from omnium_devstack.server import PortInUse, StackError, free_port, port_is_free
from omnium_devstack.stack import Stack, running_stack

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
    "free_port",
    "port_is_free",
    "running_stack",
]
