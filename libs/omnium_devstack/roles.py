"""The database roles on the dev stack and the HA profile, made as production makes them.

`libs/omnium_db/roles/roles.sql` holds the group roles and their grants; an environment makes a
login user in each (deploy/README.md, "Database roles"). Here, on a PostgreSQL this process
reaches as its superuser:

- `prepare_migrator` makes the migration group and its login, `migrate`, whose sessions act as
  the group (`ALTER ROLE ... SET role`), so the tables the migrations make belong to
  `omnium_migrator`; the database and its `public` schema are handed to the group, and so is
  anything a superuser made there before (a dev stack from before the roles).
- After the migrations, `grant_services` applies roles.sql and makes one login per service in
  its group. `service_urls` gives each process the database address with its own login.

The dev servers trust loopback, so the logins have no password; in production each has its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from omnium_db import MIGRATION_ROLE, SERVICE_ROLES, apply_roles
from omnium_devstack.launcher import ServiceSpec

MIGRATION_LOGIN = "migrate"
# A login user per service, in its group role.
SERVICE_LOGINS = {service: service for service in SERVICE_ROLES}
# The login each process of the dev stack connects as; the provider pull sends scoring's
# commands and reads scoring's tables. Processes not named here use no database.
PROCESS_LOGINS = {**SERVICE_LOGINS, "providers": SERVICE_LOGINS["scoring"]}

# Whatever a superuser made in `public` before the migrator owned it goes to the migrator: tables,
# views and free sequences (a column's own sequence follows its table), routines and types, but
# not what an extension (pgcrypto) owns.
_HAND_OVER = f"""
DO $hand_over$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT c.oid::regclass AS name,
           CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                          WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END AS kind
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
       AND c.relowner <> '{MIGRATION_ROLE}'::regrole
       AND NOT EXISTS (SELECT 1 FROM pg_depend d
                        WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                          AND d.deptype IN ('a', 'i', 'e'))
  LOOP
    EXECUTE format('ALTER %s %s OWNER TO {MIGRATION_ROLE}', r.kind, r.name);
  END LOOP;
  FOR r IN
    SELECT p.oid::regprocedure AS name
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'public' AND p.proowner <> '{MIGRATION_ROLE}'::regrole
       AND NOT EXISTS (SELECT 1 FROM pg_depend d
                        WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                          AND d.deptype = 'e')
  LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO {MIGRATION_ROLE}', r.name);
  END LOOP;
  FOR r IN
    SELECT t.oid::regtype AS name
      FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
     WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd')
       AND t.typowner <> '{MIGRATION_ROLE}'::regrole
       AND NOT EXISTS (SELECT 1 FROM pg_depend d
                        WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid
                          AND d.deptype = 'e')
  LOOP
    EXECUTE format('ALTER TYPE %s OWNER TO {MIGRATION_ROLE}', r.name);
  END LOOP;
END
$hand_over$;
"""


def login_url(url: str, login: str) -> str:
    """`url` with `login` as its user (and no password): the same servers and parameters."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{login}@{hosts}"))


async def _login(conn: asyncpg.Connection, login: str, group: str) -> None:
    exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", login)
    if not exists:
        await conn.execute(f'CREATE ROLE "{login}" LOGIN')
    await conn.execute(f'GRANT "{group}" TO "{login}"')


async def prepare_migrator(superuser_url: str) -> str:
    """The migration group and its login, the database handed to them; the migration login's
    address is returned (run `python -m omnium_db migrate` with it)."""
    conn = await asyncpg.connect(superuser_url, timeout=10)
    try:
        async with conn.transaction():
            if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", MIGRATION_ROLE):
                await conn.execute(f"CREATE ROLE {MIGRATION_ROLE} NOLOGIN")
            await _login(conn, MIGRATION_LOGIN, MIGRATION_ROLE)
            # Its sessions act as the group, so what the migrations make belongs to the group.
            await conn.execute(f'ALTER ROLE "{MIGRATION_LOGIN}" SET role = {MIGRATION_ROLE}')
            database = await conn.fetchval("SELECT current_database()")
            await conn.execute(f'ALTER DATABASE "{database}" OWNER TO {MIGRATION_ROLE}')
            await conn.execute(f"ALTER SCHEMA public OWNER TO {MIGRATION_ROLE}")
            await conn.execute(_HAND_OVER)
    finally:
        await conn.close()
    return login_url(superuser_url, MIGRATION_LOGIN)


async def grant_services(superuser_url: str) -> None:
    """roles.sql applied (after the migrations: it grants on their tables) and a login per
    service in its group."""
    conn = await asyncpg.connect(superuser_url, timeout=10)
    try:
        await apply_roles(conn)
        async with conn.transaction():
            for service, login in SERVICE_LOGINS.items():
                await _login(conn, login, SERVICE_ROLES[service])
    finally:
        await conn.close()


def service_urls(url: str) -> dict[str, str]:
    """Each dev-stack process that uses the database, and its address with its own login."""
    return {process: login_url(url, login) for process, login in PROCESS_LOGINS.items()}


def own_logins(specs: Sequence[ServiceSpec], url: str) -> list[ServiceSpec]:
    """`specs` with OMNIUM_DATABASE_URL set, for each process that uses the database, to
    `url` with its own login."""
    urls = service_urls(url)
    return [
        dataclasses.replace(spec, env={**spec.env, "OMNIUM_DATABASE_URL": urls[spec.name]})
        if spec.name in urls
        else spec
        for spec in specs
    ]
