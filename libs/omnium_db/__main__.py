"""The release's migration step: `python -m omnium_db migrate` (see --help).

Run once per release, before any service of it starts (the Kubernetes Job
deploy/kubernetes/migrate.yaml; `make run` runs it first). Services never migrate: they check
the schema at start-up and refuse one too old or too far ahead, saying what to run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import asyncpg

from omnium_db._migrations import (
    MigrateLimits,
    MigrationBusy,
    MigrationError,
    applied_versions,
    apply_migrations,
    load_migrations,
)
from omnium_db._pool import connect_primary
from omnium_settings import Settings, SettingsError

EXIT_BUSY = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m omnium_db", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    migrate = sub.add_parser(
        "migrate",
        help="apply the migrations this release adds, one transaction each, under a short lock "
        "timeout tried again (OMNIUM_MIGRATE_*) and no statement limit",
    )
    migrate.add_argument(
        "--no-wait",
        action="store_true",
        help=f"while another migration runs, exit {EXIT_BUSY} at once instead of waiting "
        "OMNIUM_MIGRATE_WAIT_SECONDS for it",
    )
    sub.add_parser("status", help="the database's schema version and this code's")
    return parser


def limits_from(settings: Settings) -> MigrateLimits:
    database = settings.database
    return MigrateLimits(
        lock_timeout_seconds=database.migrate_lock_timeout_seconds,
        lock_tries=database.migrate_lock_tries,
        retry_pause_seconds=database.migrate_retry_seconds,
    )


def _say(line: str) -> None:
    print(f"migrate: {line}", flush=True)


async def _run(args: argparse.Namespace, settings: Settings) -> None:
    conn = await connect_primary(settings, server_settings={"application_name": "omnium-migrate"})
    try:
        known = len(load_migrations())
        if args.command == "status":
            versions = await applied_versions(conn)
            print(f"database at version {max(versions, default=0)}; this code's is {known}")
            return
        wait = 0.0 if args.no_wait else settings.database.migrate_wait_seconds
        applied = await apply_migrations(
            conn, limits=limits_from(settings), wait_seconds=wait, say=_say
        )
        versions = await applied_versions(conn)
        done = f"applied {applied[0]:04d} to {applied[-1]:04d}" if applied else "nothing to apply"
        _say(f"{done}; the schema is at version {max(versions, default=0)} (this code's: {known})")
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        asyncio.run(_run(args, settings))
    except SettingsError as exc:
        print(f"migrate: {exc}", file=sys.stderr)
        return 2
    except MigrationError as exc:
        print(f"migrate: {exc}", file=sys.stderr)
        return EXIT_BUSY if isinstance(exc, MigrationBusy) else 1
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"migrate: the database did not answer or refused: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
