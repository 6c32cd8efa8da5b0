"""The guards: checks on a whole run before any of it is written.

`first_stop` reads what the checks compare a run with; the checks themselves are pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from omnium_imports._batches import Clearing
from omnium_imports._runs import Integration, IntegrationSettings
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappedRow
from omnium_settings import Settings

FINISHED_STATUSES = frozenset({"OFFICIAL", "UNOFFICIAL"})


@dataclass(frozen=True, slots=True)
class Limits:
    """An integration's guard limits: its own settings over the process defaults."""

    min_share: float
    usual_runs: int
    max_not_placed: float
    max_refused: float
    max_cleared: int
    max_reopened: int

    @classmethod
    def of(cls, settings: Settings, overrides: IntegrationSettings) -> Limits:
        return cls(
            min_share=float(overrides.get("min_share", settings.imports.guard_min_share)),
            usual_runs=int(overrides.get("usual_runs", settings.imports.guard_usual_runs)),
            max_not_placed=float(
                overrides.get("max_not_placed", settings.imports.guard_max_not_placed)
            ),
            max_refused=float(overrides.get("max_refused", settings.imports.guard_max_refused)),
            max_cleared=int(overrides.get("max_cleared", settings.imports.guard_max_cleared)),
            max_reopened=int(overrides.get("max_reopened", settings.imports.guard_max_reopened)),
        )


def usual_rows(history: Sequence[int], limits: Limits) -> float | None:
    """The median row count of the last written runs; None before there is any."""
    recent = list(history)[: limits.usual_runs]
    return statistics.median(recent) if recent else None


def too_few(rows: int, usual: float | None, limits: Limits) -> str | None:
    if usual is None or rows >= limits.min_share * usual:
        return None
    return (
        f"Scout sent {rows:,} row{'' if rows == 1 else 's'}; it usually sends about "
        f"{round(usual):,}. "
        "Nothing from this run was written."
    )


def not_placed_or_held(mapped: Sequence[MappedRow], unplaceable: int, limits: Limits) -> str | None:
    held = sum(1 for row in mapped if row.outcome == "held")
    considered = sum(1 for row in mapped if row.outcome in ("ok", "held"))
    if not considered or (unplaceable + held) / considered <= limits.max_not_placed:
        return None
    return (
        f"{unplaceable + held:,} of {considered:,} rows name units or competitors we do not "
        f"have (more than {limits.max_not_placed:.0%}). Nothing from this run was written."
    )


def unusable(mapped: Sequence[MappedRow], limits: Limits) -> str | None:
    """Rows that could not be mapped at all: a share over the refused limit pauses the run."""
    problems = sum(1 for row in mapped if row.outcome == "problem")
    if not mapped or problems / len(mapped) <= limits.max_refused:
        return None
    return (
        f"{problems:,} of {len(mapped):,} rows could not be read (more than "
        f"{limits.max_refused:.0%}); the first: {_first_reason(mapped)}. "
        "Nothing from this run was written."
    )


def cleared_and_reopened(
    rows: Sequence[MappedRow],
    current: Mapping[str, Mapping[str, Any]],
    unit_ids: Mapping[str, str],
    clearing: Clearing,
    limits: Limits,
) -> str | None:
    """I12: a run that would clear many records or reopen finished units is held for a person.

    `current` is our data for the run's units by id: status, the clearable fields, their pins
    and sides. A record counts once however many of its values would go (a unit and its sides
    are one record). A clear counts when it would be written: the mapping owns the field, we
    hold a value, and no person pinned it (the same rule the batches follow, `Clearing`); a
    status a person pinned is not reopened by an import, so it does not count either.
    """
    cleared: list[str] = []
    reopened: list[str] = []
    for row in rows:
        value = row.value
        unit_id = value.get("unit_id") or unit_ids.get(str(value.get("code")))
        ours = current.get(unit_id or "")
        if ours is None:
            continue
        name = str(value.get("code") or unit_id)
        status = value.get("status")
        if (
            ours["status"] in FINISHED_STATUSES
            and status
            and status not in FINISHED_STATUSES
            and "status" not in (ours.get("pinned") or ())
        ):
            reopened.append(name)
        clears = _written_clears(clearing.unit_fields(value), ours)
        sides = {side["order"]: side for side in ours.get("sides") or ()}
        for side in value.get("sides") or ():
            mine = sides.get(side.get("order"))
            if mine is not None:
                clears += _written_clears(clearing.side_fields(side), mine)
        if clears:
            cleared.append(name)
    if len(reopened) > limits.max_reopened:
        return (
            f"This run would reopen {len(reopened)} finished units (at most "
            f"{limits.max_reopened} may), e.g. {', '.join(reopened[:3])}. "
            "Nothing from this run was written."
        )
    return _too_many_cleared(cleared, "results, ranks, medals, times", limits)


def zeroed_medal_rows(
    rows: Sequence[MappedRow], current: Mapping[str, Mapping[str, Any]], limits: Limits
) -> str | None:
    """I12 for a medal table: a row of ours with medals that the run would set to none is a
    record cleared (a table of zeros read from a broken page must not go out). `current` is
    our medal rows by "<discipline code or empty>:<NOC>", with their totals and pins."""
    cleared = []
    for row in rows:
        value = row.value
        ref = f"{value.get('scope') or ''}:{value.get('noc')}"
        ours = current.get(ref)
        if ours is None or not ours["total"] or "total" in (ours.get("pinned") or ()):
            continue
        if not any(value.get(name) for name in ("gold", "silver", "bronze", "total")):
            cleared.append(ref.lstrip(":"))
    return _too_many_cleared(cleared, "medal rows set to no medal", limits)


def _too_many_cleared(cleared: Sequence[str], what: str, limits: Limits) -> str | None:
    if len(cleared) <= limits.max_cleared:
        return None
    return (
        f"This run would clear {len(cleared)} records we hold ({what}; at most "
        f"{limits.max_cleared} may), e.g. {', '.join(cleared[:3])}. "
        "Nothing from this run was written."
    )


def _written_clears(names: Sequence[str], ours: Mapping[str, Any]) -> int:
    pinned = ours.get("pinned") or ()
    return sum(1 for name in names if ours.get(name) not in (None, "") and name not in pinned)


def _first_reason(mapped: Sequence[MappedRow]) -> str:
    return next((row.reason for row in mapped if row.outcome == "problem"), "")


def guard_names(limits: Limits) -> tuple[str, ...]:
    """Each guard's name with the limit it holds this integration to, as `mapping check`
    lists them, in the order they are asked."""
    return (
        f"size (at least {limits.min_share:.0%} of the usual rows, the median of the last "
        f"{limits.usual_runs} written runs)",
        f"rows that cannot be read (at most {limits.max_refused:.0%})",
        f"rows naming what we do not have (at most {limits.max_not_placed:.0%})",
        f"records cleared (at most {limits.max_cleared}) or finished units reopened (at most "
        f"{limits.max_reopened}) (I12)",
    )


async def first_stop(
    conn: asyncpg.Connection,
    integration: Integration,
    build: str | None,
    mapped: list[MappedRow],
    ready: list[MappedRow],
    unit_ids: dict[str, str],
    clearing: Clearing,
    limits: Limits,
) -> tuple[str | None, bool | None]:
    """The first guard that stops this run, in plain words (None when all pass), and
    whether it passed the size check (None for a page run, which has none)."""
    said = await verdicts(conn, integration, build, mapped, ready, unit_ids, clearing, limits)
    stop = next((reason for reason in said if reason is not None), None)
    return stop, (said[0] is None if build != "page" else None)


async def verdicts(
    conn: asyncpg.Connection,
    integration: Integration,
    build: str | None,
    mapped: list[MappedRow],
    ready: list[MappedRow],
    unit_ids: dict[str, str],
    clearing: Clearing,
    limits: Limits,
) -> list[str | None]:
    """What each guard says of the run (guard_names' order): its reason to stop, or None."""
    history = [
        r["row_count"]
        for r in await conn.fetch(
            *QUERIES.bind(
                "usual_row_counts",
                integration_id=integration.id,
                build=build,
                at_most=limits.usual_runs,
            )
        )
    ]
    ids = [
        i
        for i in (r.value.get("unit_id") or unit_ids.get(str(r.value.get("code"))) for r in ready)
        if i
    ]
    current = (
        {row["id"]: dict(row) for row in await conn.fetch(QUERIES["current_units"], ids)}
        if integration.target == "unit" and ids
        else {}
    )
    # Only rows to be sent can name a unit we lack: one the fast path skipped is written on
    # our unit already (and `unit_ids` knows only the rows to be sent).
    unplaceable = (
        0
        if integration.creates_units or integration.target != "unit"
        else sum(
            1
            for r in ready
            if r.outcome == "ok"
            and not (r.value.get("unit_id") or unit_ids.get(str(r.value.get("code"))))
        )
    )
    short = too_few(len(mapped), usual_rows(history, limits), limits) if build != "page" else None
    if integration.target == "medal_row":
        medals = {
            row["ref"]: dict(row)
            for row in await conn.fetch(QUERIES["current_medal_rows"], integration.id)
        }
        cleared = zeroed_medal_rows(ready, medals, limits)
    else:
        cleared = cleared_and_reopened(ready, current, unit_ids, clearing, limits)
    return [
        short,
        unusable(mapped, limits),
        not_placed_or_held(mapped, unplaceable, limits),
        cleared,
    ]
