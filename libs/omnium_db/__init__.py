"""The database layer: a pool per road, .sql migrations, named queries, LISTEN that reconnects."""

from __future__ import annotations

from omnium_db._listen import Notified, NotifyListener
from omnium_db._migrations import (
    MIGRATIONS_DIR,
    MigrateLimits,
    MigrationBusy,
    MigrationError,
    SchemaMismatch,
    applied_versions,
    apply_migrations,
    check_schema,
    require_schema,
)
from omnium_db._outage import (
    DATABASE_ERRORS,
    connection_lost,
    is_outage,
    not_connected,
    outlast,
    pool_answers,
)
from omnium_db._pool import (
    PoolRoad,
    connect_each_host,
    connect_primary,
    create_pool,
    host_dsns,
    init_connection,
)
from omnium_db._queries import Composed, Queries
from omnium_db._roles import MIGRATION_ROLE, ROLES_SQL, SERVICE_ROLES, apply_roles
from omnium_db._schema import UNIT_STATUSES

__all__ = [
    "DATABASE_ERRORS",
    "MIGRATIONS_DIR",
    "MIGRATION_ROLE",
    "ROLES_SQL",
    "SERVICE_ROLES",
    "UNIT_STATUSES",
    "Composed",
    "MigrateLimits",
    "MigrationBusy",
    "MigrationError",
    "Notified",
    "NotifyListener",
    "PoolRoad",
    "Queries",
    "SchemaMismatch",
    "applied_versions",
    "apply_migrations",
    "apply_roles",
    "check_schema",
    "connect_each_host",
    "connect_primary",
    "connection_lost",
    "create_pool",
    "host_dsns",
    "init_connection",
    "is_outage",
    "not_connected",
    "outlast",
    "pool_answers",
    "require_schema",
]
