"""The database layer: one asyncpg pool per road, numbered .sql migrations, named queries."""

from __future__ import annotations

from omnium_db._migrations import MIGRATIONS_DIR, MigrationError, applied_versions, apply_migrations
from omnium_db._pool import Road, create_pool, init_connection
from omnium_db._queries import Composed, Queries
from omnium_db._schema import UNIT_STATUSES

__all__ = [
    "MIGRATIONS_DIR",
    "UNIT_STATUSES",
    "Composed",
    "MigrationError",
    "Queries",
    "Road",
    "applied_versions",
    "apply_migrations",
    "create_pool",
    "init_connection",
]
