"""Command line for accounts: python -m omnium_accounts <command> (see --help).

There is no built-in password: the first admin is made here. The password is asked twice on
the terminal, or read from the first line of standard input with --password-stdin.

`assign SCHEDULE.csv` gives scorers their matches for a whole schedule: a header line naming
login, unit, venue, day, then one assignment a line (a login and a unit code, or a login, a
venue and a day as YYYY-MM-DD). Every line is checked first; one bad line writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys

import asyncpg

from omnium_accounts._accounts import ROLES, AccountError, Accounts, check_password_rules
from omnium_accounts._assignments import Assignments, read_schedule
from omnium_db import SchemaMismatch, check_schema, create_pool, init_connection
from omnium_db._pool import PoolRoad
from omnium_devstack.binaries import MissingBinaries
from omnium_devstack.local import dev_database
from omnium_devstack.server import StackError
from omnium_settings import Settings, SettingsError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m omnium_accounts", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="make an account")
    create.add_argument("--login", required=True)
    create.add_argument("--name", help="the person's name (default: the login)")
    create.add_argument("--role", required=True, choices=ROLES)
    create.add_argument("--password-stdin", action="store_true")
    password = sub.add_parser("password", help="set a new password (also lifts a slow-down)")
    password.add_argument("--login", required=True)
    password.add_argument("--password-stdin", action="store_true")
    sub.add_parser("list", help="every account and its role")
    assign = sub.add_parser(
        "assign",
        help="give scorers their matches from a CSV (login,unit,venue,day); "
        "each match or venue day it names gets exactly the scorers it lists",
    )
    assign.add_argument("schedule", help="the CSV file ('-' reads standard input)")
    assign.add_argument("--event", help="the event's code (needed when there are several)")
    for name, what in (
        ("disable", "turn an account off: it cannot sign in and its sessions end at once"),
        ("enable", "turn an account on again"),
        ("sign-out", "end every session of an account (a lost phone or tablet)"),
    ):
        sub.add_parser(name, help=what).add_argument("--login", required=True)
    return parser


def _read_password(from_stdin: bool, settings: Settings) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    while True:
        first = getpass.getpass("Password: ")
        try:
            check_password_rules(first, settings)
        except AccountError as exc:
            print(exc, file=sys.stderr)
            continue
        if getpass.getpass("Again: ") == first:
            return first
        print("the two passwords differ; try again", file=sys.stderr)


def _read_schedule(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8-sig", newline="") as file:
            return file.read()
    except OSError as exc:
        raise AccountError(f"cannot read {path}: {exc.strerror}") from None


async def _run(args: argparse.Namespace, settings: Settings) -> None:
    # The file is checked before any connection: a bad line is told at once.
    lines = read_schedule(_read_schedule(args.schedule)) if args.command == "assign" else []
    conn = await asyncpg.connect(settings.require_database_url())
    try:
        await init_connection(conn)
        # A tool, like a service, never migrates: that is the release's step.
        await check_schema(conn, "accounts", settings.database.schema_ahead_allowed)
    finally:
        await conn.close()
    pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="accounts-cli", size=2)
    # Recorded with each change, as the console records the signed-in person.
    by = (f"the command line ({getpass.getuser()})", "cli")
    try:
        accounts = Accounts(pool, settings)
        if args.command == "assign":
            print(await Assignments(pool).load_schedule(lines, event_code=args.event, by=by))
        elif args.command == "list":
            for view in await accounts.overview():
                off = "  (off)" if view.disabled else ""
                print(f"{view.login:24} {view.role:9} {view.name}{off}")
        elif args.command in ("disable", "enable"):
            ended = await accounts.set_disabled(args.login, args.command == "disable", by=by)
            print(f"turned {args.login!r} {'off' if args.command == 'disable' else 'on'}", end="")
            print(f"; ended {ended} session(s)" if ended else "")
        elif args.command == "sign-out":
            ended = await accounts.sign_out_everywhere(args.login, by=by)
            print(f"ended {ended} session(s) of {args.login!r}")
        elif args.command == "create":
            password = _read_password(args.password_stdin, settings)
            account = await accounts.create(
                args.login, args.name or args.login, args.role, password, by=by
            )
            print(f"made the {account.role} account {account.login!r}")
        else:
            ended = await accounts.set_password(
                args.login, _read_password(args.password_stdin, settings), by=by
            )
            print(f"set a new password for {args.login!r}; ended {ended} session(s)")
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        with dev_database(settings) as url:
            asyncio.run(_run(args, settings.replace(database_url=url)))
    except SchemaMismatch as exc:
        print(exc, file=sys.stderr)  # it names this command line itself
        return 2
    except (AccountError, SettingsError, StackError, MissingBinaries) as exc:
        print(f"accounts: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main())
