"""`mapping check`: what a mapping version would make of a Scout run, before anything is on.

The rows are mapped here (MappingVersion.map_rows, with the integration's lookups), and when the
command service answers they go to it as a dry run (Pipeline.dry_run), which compares them with
our data and says what each would do: accepted (a change), unchanged, held, not placed, refused.
Nothing is written either way.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import asyncpg
from google.protobuf import json_format, struct_pb2

from omnium.command.v1 import command_pb2_grpc
from omnium_grpc import ROW_OUTCOMES, open_channel
from omnium_imports import _guards as guards
from omnium_imports import _runs
from omnium_imports._batches import Clearing
from omnium_imports._inputs import SetupError
from omnium_imports._scout import ScoutClient, ScoutError, ScoutRun
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappingContext, MappingVersion
from omnium_imports.run import Pipeline
from omnium_settings import Settings

# The words a row can end with, in the order the counts are printed.
WORDS = (
    "accepted",
    "ok",
    "unchanged",
    "kept_by_hand",
    "held",
    "not_placed",
    "refused",
    "problem",
    "skipped",
)
# Rows with these outcomes mean the mapping (or our data) needs work before it is turned on.
BAD = ("problem", "refused")
_REACH_SECONDS = 3.0


class CommandUnavailable(Exception):
    """The command service answered, but would not do the dry run; the message says why."""


@dataclass(slots=True)
class CheckedRow:
    position: int
    key: str
    outcome: str
    reason: str = ""
    changes: list[tuple[str, str, str]] = field(default_factory=list)  # field, old, new


@dataclass(slots=True)
class CheckReport:
    integration: str
    mapping: str  # "version 2", "file my-mapping.json"
    rows_from: str  # "Scout's run ... (passed, 1,252 rows, build all)"
    compared: str | None  # how the rows were compared with our data; None: mapped only
    not_compared: str  # why not, when compared is None
    total: int
    counts: Counter[str]
    rows: list[CheckedRow]  # every row that is not plain: changed, held, problem ...
    # What each guard would say of the run: its name, and its reason to pause or None.
    guards: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def bad(self) -> int:
        return sum(self.counts[word] for word in BAD)


async def check_mapping(
    settings: Settings,
    pool: asyncpg.Pool,
    code: str,
    version: MappingVersion,
    mapping: str,
    *,
    scout_run_id: str | None = None,
    items: list[object] | None = None,
    items_from: str = "",
    compare: bool = True,
) -> CheckReport:
    """Map a Scout run (its id, Scout's newest, or rows given) with `version` and say what
    each row would become. Raises SetupError for what the person gave, ScoutError for Scout."""
    async with pool.acquire() as conn:
        integration = await conn.fetchrow(QUERIES["integration_overview"], code)
        if integration is None:
            raise SetupError(f"there is no integration {code!r}; add it with `integration add`")
        lookups: dict[str, dict[str, str]] = {}
        for row in await conn.fetch(QUERIES["lookups"], integration["id"]):
            lookups.setdefault(row["kind"], {})[row["external_id"]] = row["our_id"]
    if version.target != integration["target"]:
        raise SetupError(
            f"the mapping's target is {version.target!r}, but {code} is a "
            f"{integration['target']!r} integration; they must be the same"
        )
    scout = ScoutClient(settings)
    build: str | None = "all"  # rows given from a file are judged as a full run
    try:
        if items is None:
            run = await _scout_run(scout, integration, scout_run_id)
            build = run.build
            items = await scout.items(integration["scout_base_url"], run)
            scout_run_id = run.id
            rows_from = (
                f"Scout's run {run.id} of job {run.job or integration['scout_job']} "
                f"({run.status}, {len(items):,} rows, build {run.build or 'all'})"
            )
            if run.status == "failed":
                rows_from += f"; Scout marked it failed: {run.reason or 'no reason given'}"
        else:
            rows_from = f"{len(items):,} rows from {items_from}"
        report = CheckReport(code, mapping, rows_from, None, "", len(items), Counter(), [])
        reached, why = await _command_reachable(settings) if compare else (False, "--no-compare")
        if reached:
            await _dry_run(
                settings, pool, scout, integration["id"], scout_run_id, version, items, report
            )
        else:
            report.not_compared = why
            _map_only(version, integration["time_zone"], lookups, items, report)
        async with pool.acquire() as conn:
            report.guards = await _guards(
                conn, settings, integration["id"], version, lookups, items, build
            )
    finally:
        await scout.close()
    return report


async def _guards(
    conn: asyncpg.Connection,
    settings: Settings,
    integration_id: str,
    version: MappingVersion,
    lookups: dict[str, dict[str, str]],
    items: list[object],
    build: str | None,
) -> list[tuple[str, str | None]]:
    """What each guard would say if this run came now: the same checks a run meets, with the
    integration's own limits, every mapped row compared (no fast path)."""
    integration = await _runs.integration(conn, integration_id)
    if integration is None:
        return []
    mapped = version.map_rows(items, MappingContext(integration.time_zone, lookups))
    ready = [row for row in mapped if row.outcome == "ok"]
    unit_ids = await _runs.unit_ids(conn, integration, ready)
    limits = guards.Limits.of(settings, integration.settings)
    said = await guards.verdicts(
        conn, integration, build, mapped, ready, unit_ids, Clearing.of(version), limits
    )
    return list(zip(guards.guard_names(limits), said, strict=True))


async def _scout_run(
    scout: ScoutClient, integration: asyncpg.Record, scout_run_id: str | None
) -> ScoutRun:
    base = integration["scout_base_url"]
    if scout_run_id:
        return await scout.run(base, scout_run_id)
    newest = await scout.newest_run(base, integration["scout_job"])
    if newest is None:
        raise ScoutError(
            f"Scout at {base} has no run of job {integration['scout_job']!r} yet; check the "
            "integration's scout_url and scout_job, or give rows with --items"
        )
    return newest


async def _command_reachable(settings: Settings) -> tuple[bool, str]:
    channel = open_channel(settings.command.address, settings)
    try:
        await asyncio.wait_for(channel.channel_ready(), _REACH_SECONDS)
    except TimeoutError:
        return False, (
            f"the command service at {settings.command.address} did not answer within "
            f"{_REACH_SECONDS:g} s (OMNIUM_COMMAND_ADDRESS says where it is)"
        )
    finally:
        await channel.close()
    return True, ""


async def _dry_run(
    settings: Settings,
    pool: asyncpg.Pool,
    scout: ScoutClient,
    integration_id: str,
    scout_run_id: str | None,
    version: MappingVersion,
    items: list[object],
    report: CheckReport,
) -> None:
    # A check is asked by a person at a terminal: a command service that keeps answering
    # "try again" is said after seconds, not after a failover's minute and a half.
    quick = settings.replace(batch_retry_seconds=min(settings.imports.batch_retry_seconds, 5.0))
    channel = open_channel(settings.command.address, settings)
    try:
        pipeline = Pipeline(quick, pool, scout, command_pb2_grpc.CommandServiceStub(channel))
        answers, outcomes = await pipeline.dry_run(
            integration_id, scout_run_id or "", version=version, items=items
        )
    except ScoutError as exc:
        # Pipeline.dry_run says a batch the command service would not answer as a ScoutError.
        raise CommandUnavailable(
            f"{exc}. Is OMNIUM_GRPC_TOKEN the token of one of the command service's callers, "
            "with the role service (docs/callers.md)? --no-compare checks the mapping alone"
        ) from None
    finally:
        await channel.close()
    report.compared = f"the command service at {settings.command.address}, as a dry run"
    report.counts.update(outcomes)
    report.rows = [
        CheckedRow(
            a.position,
            a.key,
            ROW_OUTCOMES.get(a.outcome, "problem"),
            a.reason,
            [(c.field, _text(c.old), _text(c.new)) for c in a.changes],
        )
        for a in answers
    ]


def _map_only(
    version: MappingVersion,
    time_zone: str,
    lookups: dict[str, dict[str, str]],
    items: list[object],
    report: CheckReport,
) -> None:
    mapped = version.map_rows(items, MappingContext(time_zone, lookups))
    report.counts.update(row.outcome for row in mapped)
    report.rows = [
        CheckedRow(row.position, row.key or "", row.outcome, row.reason)
        for row in mapped
        if row.outcome != "ok"
    ]


def _text(value: struct_pb2.Value) -> str:
    if value.WhichOneof("kind") in (None, "null_value"):
        return "(empty)"
    plain = json_format.MessageToDict(value)
    if isinstance(plain, float) and plain.is_integer():
        return str(int(plain))
    return str(plain)


# -- what is printed ----------------------------------------------------------------------------


def describe(report: CheckReport, rows: int) -> list[str]:
    """The report as lines: where the rows came from, each row that is not plain (the first
    `rows` of them; 0: all), the counts, and the reasons most rows share."""
    out = [
        f"{report.integration}: mapping {report.mapping}, against {report.rows_from}.",
        (
            f"Compared with our data by {report.compared}: nothing was written."
            if report.compared
            else "Mapped only, not compared with our data (so no row says accepted or "
            f"unchanged yet): {report.not_compared}. Nothing was written."
        ),
        "",
    ]
    # What needs work first: problems, then refused, held and not placed rows, then changes.
    ordered = sorted(report.rows, key=lambda r: (_FIRST.get(r.outcome, len(_FIRST)), r.position))
    listed = ordered if rows == 0 else ordered[:rows]
    if listed:
        width = max(len(r.key) for r in listed)
        out.append(f"{'row':>6}  {'key':<{width}}  {'would be':<12}  why, or what would change")
        for r in listed:
            out.append(f"{r.position:>6}  {r.key:<{width}}  {_word(r.outcome):<12}  {_why(r)}")
        if len(listed) < len(report.rows):
            out.append(
                f"({len(listed)} of {len(report.rows):,} such rows listed; "
                "--rows N lists more, --rows 0 all)"
            )
        out.append("")
    counts = " · ".join(
        f"{_word(word)} {report.counts[word]:,}" for word in WORDS if report.counts[word]
    )
    out.append(f"{report.total:,} rows: {counts or 'none'}")
    if report.guards:
        stops = sum(1 for _, said in report.guards if said)
        out.append(
            "Guards, as they would judge this run now: "
            + (f"{stops} would pause it." if stops else "all would pass.")
        )
        for name, said in report.guards:
            out.append(f"  {name}: {said or 'passes'}")
    for word in ("problem", "refused", "held", "not_placed"):
        reasons = Counter(r.reason for r in report.rows if r.outcome == word and r.reason)
        if not reasons:
            continue
        out.append(f"{_word(word).capitalize()}, most common reason first:")
        for reason, count in reasons.most_common(5):
            out.append(f"  {count:>6,} × {reason}")
        if len(reasons) > 5:
            out.append(f"  ... and {len(reasons) - 5} other reasons")
    return out


_FIRST = {word: n for n, word in enumerate(("problem", "refused", "held", "not_placed"))}


def _word(outcome: str) -> str:
    return {
        "ok": "mapped",
        "kept_by_hand": "kept by hand",
        "not_placed": "not placed",
    }.get(outcome, outcome)


def _why(row: CheckedRow) -> str:
    if row.reason:
        return row.reason
    if not row.changes:
        return ""
    shown = [f"{name}: {old} → {new}" for name, old, new in row.changes[:3]]
    more = len(row.changes) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")
