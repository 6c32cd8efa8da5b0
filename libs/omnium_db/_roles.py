"""The database roles: the migration role that owns the schema, one role per service with only
the grants its queries need (roles/roles.sql)."""

from __future__ import annotations

from pathlib import Path

import asyncpg

# In a folder of its own: no package keeps SQL beside its code, and sql/ holds named queries.
ROLES_SQL = Path(__file__).with_name("roles") / "roles.sql"
MIGRATION_ROLE = "omnium_migrator"
SERVICE_ROLES = {
    service: f"omnium_{service}"
    for service in ("command", "imports", "scoring", "delivery", "gateway", "admin")
}


async def apply_roles(conn: asyncpg.Connection) -> None:
    """Make the roles that are missing and set every grant again (run after the migrations, as
    the schema's owner or a superuser; running it twice changes nothing)."""
    async with conn.transaction():
        await conn.execute(ROLES_SQL.read_text())
