"""The imports command line: integrations, reference data, lookups and mappings from files.

    python -m omnium_imports                    the service (as `serve`)
    python -m omnium_imports integration add FILE | list | show CODE | pause CODE | resume CODE
    python -m omnium_imports reference load FILE_OR_URL
    python -m omnium_imports lookups add CODE (FILE | --from-reference FILE_OR_URL)
    python -m omnium_imports mapping check CODE [--file FILE | --version N] [--run ID]
    python -m omnium_imports mapping publish CODE FILE

It works on OMNIUM_DATABASE_URL, or on the dev stack's database (`make run`). Every file is
checked before anything is written. Exit codes: 0 done; 1 a check found problem rows, or Scout,
the database or the command service could not be used; 2 what was given cannot be used (each
problem is named with its file, line and field).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import asyncpg

from omnium_db import (
    DATABASE_ERRORS,
    PoolRoad,
    SchemaMismatch,
    check_schema,
    create_pool,
    init_connection,
)
from omnium_devstack import MissingBinaries, StackError
from omnium_devstack.local import dev_database, dev_grpc_token
from omnium_imports import _queue
from omnium_imports._check import CommandUnavailable, check_mapping, describe
from omnium_imports._files import (
    IntegrationSpec,
    LookupLine,
    integration_from,
    lookups_from,
    mapping_from,
    scout_address_problems,
)
from omnium_imports._inputs import Document, Problem, SetupError, read_document
from omnium_imports._reference import check_reference, unread_fields
from omnium_imports._scout import ScoutError
from omnium_imports._setup import (
    add_lookups,
    add_version,
    integration_id,
    load_reference,
    register_integration,
    resolve_lookups,
    set_state,
)
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import LOOKUP_KINDS, MappingVersion
from omnium_outbound import LOOPBACK
from omnium_settings import Settings, SettingsError

PROG = "python -m omnium_imports"


@dataclass(slots=True)
class Context:
    settings: Settings
    pool: asyncpg.Pool
    out: TextIO

    def say(self, *lines: str) -> None:
        for line in lines:
            print(line, file=self.out)


# A command: `prepare` reads and checks its files before any database is opened (a problem
# there is exit 2, with nothing touched), `act` does the work with what `prepare` gave.
Prepare = Callable[[argparse.Namespace], object]
Act = Callable[[Context, argparse.Namespace, Any], Awaitable[int]]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="The imports service (no command, or serve), and its command line: "
        "integrations, reference data, lookups and mappings, from files. "
        "See services/imports/README.md, 'Add an integration in ten minutes'.",
    )
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser("serve", help="start the imports service (the same as no command)")

    integration = commands.add_parser("integration", help="add, list, show, pause or resume")
    what = integration.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = what.add_parser("add", help="add an integration from a JSON file (paused unless it says)")
    add.add_argument("file", help="the integration file (README.md: 'The integration file')")
    add.set_defaults(prepare=_prepare_integration, act=_integration_add)
    listing = what.add_parser("list", help="every integration, its state and last run")
    listing.set_defaults(prepare=_nothing, act=_integration_list)
    show = what.add_parser("show", help="one integration: Scout, versions, lookups, last runs")
    show.add_argument("code")
    show.add_argument(
        "--mapping", action="store_true", help="print its current mapping only (JSON)"
    )
    show.set_defaults(prepare=_nothing, act=_integration_show)
    for name, state, words in (
        ("pause", "paused", "pause it: no runs until it is resumed"),
        ("resume", "on", "turn it on, and queue a check of Scout's newest run at once"),
    ):
        one = what.add_parser(name, help=words)
        one.add_argument("code")
        one.set_defaults(prepare=_nothing, act=_set_state, state=state)

    reference = commands.add_parser("reference", help="load the Games' reference data")
    ref_what = reference.add_subparsers(dest="action", metavar="ACTION", required=True)
    load = ref_what.add_parser(
        "load", help="the event, its disciplines and competitors (README-reference.md)"
    )
    load.add_argument("source", metavar="FILE_OR_URL", help="a reference file, or its http(s) URL")
    load.set_defaults(prepare=_prepare_reference, act=_reference_load)

    lookups = commands.add_parser("lookups", help="Scout's ids of competitors and units, to ours")
    look_what = lookups.add_subparsers(dest="action", metavar="ACTION", required=True)
    look_add = look_what.add_parser("add", help="add lookups from a CSV or JSON file")
    look_add.add_argument("code", help="the integration")
    look_add.add_argument(
        "file", nargs="?", help="scout_id,ours lines (CSV), or {kind: {scout_id: ours}} (JSON)"
    )
    look_add.add_argument(
        "--from-reference",
        metavar="FILE_OR_URL",
        help="each competitor of this reference is its own Scout id (as when the reference "
        "came from Scout)",
    )
    look_add.add_argument(
        "--kind",
        choices=LOOKUP_KINDS,
        default="competitor",
        help="for CSV lines with no kind column (default: %(default)s)",
    )
    look_add.set_defaults(prepare=_prepare_lookups, act=_lookups_add)

    mapping = commands.add_parser("mapping", help="check a mapping on Scout's rows; publish it")
    map_what = mapping.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = map_what.add_parser(
        "check", help="what each row of a Scout run would become; writes nothing"
    )
    check.add_argument("code", help="the integration")
    which = check.add_mutually_exclusive_group()
    which.add_argument("--file", help="a mapping file not published yet")
    which.add_argument("--version", type=int, help="a published version (default: the current)")
    rows = check.add_mutually_exclusive_group()
    rows.add_argument("--run", help="Scout's run id (default: Scout's newest run of the job)")
    rows.add_argument(
        "--items", help='rows in a JSON file: a list, or {"items": [...]} as Scout pages them'
    )
    check.add_argument(
        "--rows", type=int, default=20, help="rows to list (default: %(default)s; 0: all)"
    )
    check.add_argument(
        "--no-compare",
        action="store_true",
        help="map only; do not ask the command service what would change",
    )
    check.set_defaults(prepare=_prepare_check, act=_mapping_check)
    publish = map_what.add_parser("publish", help="make a mapping file the current version")
    publish.add_argument("code", help="the integration")
    publish.add_argument("file", help="the mapping file (README-mapping.md)")
    publish.add_argument("--note", help="why, kept with the version")
    publish.add_argument(
        "--yes", action="store_true", help="publish even though the key fields change"
    )
    publish.set_defaults(prepare=_prepare_mapping, act=_mapping_publish)
    return top


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = parser().parse_args(list(argv))
    if args.command == "serve":  # __main__ starts the service before argparse; say so
        print(f"{PROG} serve takes no arguments", file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env()
        prepared = args.prepare(args)
    except (SettingsError, SetupError) as exc:
        return _refused(exc)
    return _act(args, settings, prepared, out)


def _act(args: argparse.Namespace, settings: Settings, prepared: object, out: TextIO) -> int:
    """Runs the command on the database (the dev stack's when none is set); its exit code."""
    try:
        with dev_database(settings) as url:
            if not settings.server.database_url:
                settings = settings.replace(grpc_token=dev_grpc_token(settings))
                if not settings.server.outbound_allowed_networks:
                    # The dev stack's Scout simulator listens on this machine.
                    settings = settings.replace(outbound_allowed_networks=LOOPBACK)
            return asyncio.run(_run(args, settings.replace(database_url=url), prepared, out))
    except (SetupError, SchemaMismatch) as exc:
        return _refused(exc)
    except ScoutError as exc:
        print(f"Scout: {exc}", file=sys.stderr)
        return 1
    except CommandUnavailable as exc:
        print(f"the command service: {exc}", file=sys.stderr)
        return 1
    except DATABASE_ERRORS as exc:
        print(f"the database: {exc}. Nothing more was done.", file=sys.stderr)
        return 1
    except (StackError, MissingBinaries) as exc:
        print(f"the dev stack: {exc}", file=sys.stderr)
        return 2


def _refused(exc: Exception) -> int:
    text = exc.describe() if isinstance(exc, SetupError) else str(exc)
    print(text, file=sys.stderr)
    print("Nothing was written.", file=sys.stderr)
    return 2


async def _run(args: argparse.Namespace, settings: Settings, prepared: object, out: TextIO) -> int:
    conn = await asyncpg.connect(settings.require_database_url())
    try:
        await init_connection(conn)
        # A tool, like a service, never migrates: that is the release's step.
        await check_schema(conn, "imports", settings.database.schema_ahead_allowed)
    finally:
        await conn.close()
    pool = await create_pool(settings, PoolRoad.IMPORTS, application_name="imports-cli", size=2)
    try:
        act: Act = args.act
        return await act(Context(settings, pool, out), args, prepared)
    finally:
        await pool.close()


def _nothing(args: argparse.Namespace) -> None:
    return None


# -- integration -----------------------------------------------------------------------------


def _prepare_integration(args: argparse.Namespace) -> tuple[Document, IntegrationSpec]:
    doc = read_document(args.file)
    return doc, integration_from(doc)


async def _integration_add(
    ctx: Context, args: argparse.Namespace, prepared: tuple[Document, IntegrationSpec]
) -> int:
    doc, spec = prepared
    refused = await asyncio.to_thread(scout_address_problems, spec, ctx.settings)
    if refused:
        raise doc.fail(refused)
    async with ctx.pool.acquire() as conn:
        existed = await integration_id(conn, spec.code) is not None
        try:
            await register_integration(
                conn,
                spec,
                check_seconds=ctx.settings.imports.check_seconds,
                rotation_seconds=ctx.settings.imports.secret_rotation_seconds,
            )
        except SetupError as exc:
            raise doc.fail(exc.problems) from None
        row = await conn.fetchrow(QUERIES["integration_overview"], spec.code)
    verb = "updated" if existed else "added"
    ctx.say(
        f"{verb} {spec.code} ({row['target']}, event {row['event_code']}, Scout "
        f"{row['scout_base_url']} job {row['scout_job']}): mapping version "
        f"{row['current_version']}, {row['state']}."
    )
    if row["state"] != "on":
        ctx.say(
            f"Next: {PROG} mapping check {spec.code}, then {PROG} integration resume {spec.code}."
        )
    return 0


async def _integration_list(ctx: Context, args: argparse.Namespace, prepared: object) -> int:
    async with ctx.pool.acquire() as conn:
        rows = await conn.fetch(QUERIES["integrations"])
        if not rows:
            ctx.say(f"No integrations yet: {PROG} integration add FILE adds one.")
            return 0
        width = max(len(r["code"]) for r in rows)
        ctx.say(f"{'code':<{width}}  {'state':<7}  {'target':<9}  last run")
        for r in rows:
            last = await conn.fetchrow(QUERIES["newest_run"], r["id"])
            ctx.say(f"{r['code']:<{width}}  {r['state']:<7}  {r['target']:<9}  {_last_run(last)}")
    return 0


async def _integration_show(ctx: Context, args: argparse.Namespace, prepared: object) -> int:
    async with ctx.pool.acquire() as conn:
        row = await _integration_row(conn, args.code)
        if args.mapping:
            spec = await conn.fetchrow(QUERIES["version_spec"], row["id"], None)
            ctx.say(json.dumps(json.loads(spec["spec"]), indent=2) if spec else "{}")
            return 0
        versions = await conn.fetch(QUERIES["versions"], row["id"], 5)
        lookups = await conn.fetch(QUERIES["lookup_counts"], row["id"])
        runs = await conn.fetch(QUERIES["runs"], args.code, 5)
    ctx.say(
        f"{row['code']}: {row['name']}",
        f"  state      {row['state']}",
        f"  target     {row['target']}{' (creates units)' if row['creates_units'] else ''}",
        f"  event      {row['event_code']} ({row['time_zone']})",
        f"  Scout      {row['scout_base_url']}, job {row['scout_job']}, "
        f"checked every {row['check_seconds']} s",
        f"  mapping    version {row['current_version']}",
    )
    for v in versions:
        note = f": {v['note']}" if v["note"] else ""
        ctx.say(f"             v{v['version']} {_when(v['created_at'])}{note}")
    counts = ", ".join(f"{r['count']:,} {r['kind']}" for r in lookups) or "none"
    ctx.say(f"  lookups    {counts}")
    if not runs:
        ctx.say("  runs       none yet")
    for n, run in enumerate(runs):
        ctx.say(f"  {'runs' if n == 0 else '':<10} {_last_run(run)}")
    return 0


async def _integration_row(conn: asyncpg.Connection, code: str) -> asyncpg.Record:
    row = await conn.fetchrow(QUERIES["integration_overview"], code)
    if row is None:
        raise SetupError(f"there is no integration {code!r}; `{PROG} integration list` lists them")
    return row


def _last_run(run: asyncpg.Record | None) -> str:
    if run is None:
        return "none yet"
    outcomes = run["outcomes"] or {}
    counts = ", ".join(f"{k} {v:,}" for k, v in sorted(outcomes.items()) if v)
    text = f"{run['status']}, {run['row_count'] or 0:,} rows, {_when(run['received_at'])}"
    text += f" ({counts})" if counts else ""
    if run["reason"]:
        text += f": {run['reason']}"
    return f"{text} [Scout's run {run['scout_run_id']}]"


def _when(moment: datetime | None) -> str:
    if moment is None:
        return ""
    seconds = (datetime.now(UTC) - moment).total_seconds()
    if seconds < 90:
        return f"{max(0, int(seconds))} s ago"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min ago"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


async def _set_state(ctx: Context, args: argparse.Namespace, prepared: object) -> int:
    async with ctx.pool.acquire() as conn, conn.transaction():
        found = await set_state(conn, args.code, args.state)
        if found is None:
            raise SetupError(
                f"there is no integration {args.code!r}; `{PROG} integration list` lists them"
            )
        job = await _queue.enqueue_check(conn, found, "operator") if args.state == "on" else None
    if args.state == "on":
        queued = f"check queued as job {job}" if job else "a check is queued already"
        ctx.say(
            f"{args.code} is on; {queued}: the imports service reads Scout's newest run now, "
            f"then every check interval and on each doorbell. `{PROG} integration show "
            f"{args.code}` shows its runs."
        )
    else:
        ctx.say(
            f"{args.code} is paused: Scout's doorbells and the scheduler's checks start no run, "
            f"so nothing from Scout is read or written until `{PROG} integration resume "
            f"{args.code}`, which reads Scout's newest run at once."
        )
    return 0


# -- reference -------------------------------------------------------------------------------


def _prepare_reference(args: argparse.Namespace) -> dict[str, Any]:
    doc = read_document(args.source)
    reference = doc.json()
    problems = check_reference(reference)
    if problems:
        raise doc.fail(problems)
    assert isinstance(reference, dict)
    return reference


async def _reference_load(ctx: Context, args: argparse.Namespace, reference: Any) -> int:
    async with ctx.pool.acquire() as conn:
        ours = await load_reference(conn, reference)
    event = reference["event"]
    ctx.say(
        f"loaded {event['code']} ({event['name']}, {event['timeZone']}): "
        f"{len(reference['disciplines']):,} disciplines, {len(ours):,} competitors."
    )
    unread = unread_fields(reference)
    if unread:
        ctx.say(f"Not read (the reference format has no such fields): {', '.join(unread)}.")
    return 0


# -- lookups ---------------------------------------------------------------------------------


def _prepare_lookups(args: argparse.Namespace) -> tuple[Document, list[LookupLine]]:
    if (args.file is None) == (args.from_reference is None):
        raise SetupError("give a lookups file, or --from-reference FILE_OR_URL (one of them)")
    if args.file is not None:
        doc = read_document(args.file)
        return doc, lookups_from(doc, args.kind)
    doc = read_document(args.from_reference)
    reference = doc.json()
    problems = check_reference(reference)
    if problems:
        raise doc.fail(problems)
    lines = [
        LookupLine("competitor", c["externalId"], c["externalId"], None, ("competitors", n))
        for n, c in enumerate(reference["competitors"])
    ]
    return doc, lines


async def _lookups_add(
    ctx: Context, args: argparse.Namespace, prepared: tuple[Document, list[LookupLine]]
) -> int:
    doc, lines = prepared
    async with ctx.pool.acquire() as conn, conn.transaction():
        found = await integration_id(conn, args.code)
        if found is None:
            raise SetupError(
                f"there is no integration {args.code!r}; `{PROG} integration list` lists them"
            )
        try:
            ours = await resolve_lookups(conn, found, lines)
        except SetupError as exc:
            raise doc.fail(_for_reference(exc.problems, args)) from None
        for kind, pairs in ours.items():
            await add_lookups(conn, found, kind, pairs)
    added = ", ".join(f"{len(pairs):,} {kind}" for kind, pairs in ours.items()) or "no"
    ctx.say(f"added {added} lookups to {args.code}; held rows naming them go through next run.")
    return 0


def _for_reference(problems: Sequence[Problem], args: argparse.Namespace) -> list[Problem]:
    if args.from_reference is None:
        return list(problems)
    return [
        Problem(
            (*p.where, "externalId"),
            "we have no such competitor in the integration's event: load this reference "
            "(reference load) before adding lookups from it",
            p.line,
        )
        for p in problems
    ]


# -- mapping ---------------------------------------------------------------------------------


def _prepare_mapping(args: argparse.Namespace) -> dict[str, Any]:
    return mapping_from(read_document(args.file))


def _prepare_check(args: argparse.Namespace) -> tuple[dict[str, Any] | None, list[Any] | None]:
    mapping = mapping_from(read_document(args.file)) if args.file else None
    items = None
    if args.items:
        doc = read_document(args.items)
        loaded = doc.json()
        items = loaded.get("items") if isinstance(loaded, dict) else loaded
        if not isinstance(items, list):
            raise doc.fail([Problem((), 'rows are a JSON list, or {"items": [...]}')])
    if args.rows < 0:
        raise SetupError("--rows is how many rows to list: 0 (all) or more")
    return mapping, items


async def _mapping_check(ctx: Context, args: argparse.Namespace, prepared: Any) -> int:
    mapping, items = prepared
    label = f"file {args.file}"
    if mapping is None:
        async with ctx.pool.acquire() as conn:
            row = await _integration_row(conn, args.code)
            spec = await conn.fetchrow(QUERIES["version_spec"], row["id"], args.version)
        if spec is None:
            raise SetupError(
                f"{args.code} has no mapping version {args.version}; "
                f"`{PROG} integration show {args.code}` lists its versions"
            )
        mapping, label = json.loads(spec["spec"]), f"version {spec['version']}"
    report = await check_mapping(
        ctx.settings,
        ctx.pool,
        args.code,
        MappingVersion.parse(mapping),
        label,
        scout_run_id=args.run,
        items=items,
        items_from=args.items or "",
        compare=not args.no_compare,
    )
    ctx.say(*describe(report, args.rows))
    if report.bad:
        ctx.say(
            f"{report.bad:,} rows would not be written. Fix the mapping (README-mapping.md) and "
            "check again; nothing is written until the integration is on."
        )
        return 1
    if args.file:
        ctx.say(f"Next: {PROG} mapping publish {args.code} {args.file}")
    else:
        ctx.say(f"Next, if it is paused: {PROG} integration resume {args.code}")
    return 0


async def _mapping_publish(ctx: Context, args: argparse.Namespace, mapping: Any) -> int:
    async with ctx.pool.acquire() as conn:
        row = await _integration_row(conn, args.code)
        if mapping["target"] != row["target"]:
            raise SetupError(
                [
                    Problem(
                        ("target",),
                        f"the mapping's target is {mapping['target']!r}, but {args.code} is a "
                        f"{row['target']!r} integration",
                        source=args.file,
                    )
                ]
            )
        current = await conn.fetchrow(QUERIES["current_key_fields"], row["id"])
        before = json.loads(current["key_fields"])
        after = list(mapping.get("key_fields") or ["externalId"])
        if before != after and current["keys"] and not args.yes:
            ctx.say(
                f"The mapping's key_fields change from {before} to {after}: each of the "
                f"{current['keys']:,} keys {args.code} knows would turn missing on the next full "
                "runs (and be asked about in Waiting for you), and the same rows would come back "
                "as new keys. Nothing was published. If that is what you want, run it again "
                "with --yes."
            )
            return 1
        version, added = await add_version(conn, row["id"], mapping, args.note)
    if added:
        ctx.say(
            f"{args.code} now maps with version {version} (it was {row['current_version']}); "
            "the next run uses it."
        )
    else:
        ctx.say(f"{args.code} already maps with this mapping (version {version}); nothing changed.")
    return 0
