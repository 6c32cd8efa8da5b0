"""Which scorer scores which match: assignments by match or by venue and day, one at a time on
the console or a whole schedule from a CSV checked line by line before anything is written."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import asyncpg

from omnium_accounts._accounts import COMMAND_LINE, AccountError, Changer
from omnium_accounts._sql import QUERIES

COLUMNS = ("login", "unit", "venue", "day")
# Roles that may be given matches. Assigning an operator or admin is allowed (it is recorded
# and shown) though they may score any match; a viewer never scores.
_MAY_SCORE = ("scorer", "operator", "admin")


class ScheduleError(AccountError):
    """A schedule has bad lines; nothing was written. `problems` names each line and field."""

    def __init__(self, problems: Sequence[str]) -> None:
        shown = list(problems[:50])
        more = len(problems) - len(shown)
        text = "\n".join(shown) + (f"\n... and {more} more" if more > 0 else "")
        super().__init__(f"nothing was written: {len(problems)} problem(s) in the schedule\n{text}")
        self.problems = list(problems)


@dataclass(frozen=True, slots=True)
class ScheduleLine:
    """One assignment asked for: a login and a unit code, or a login, a venue and a day."""

    line: int
    login: str
    unit: str = ""
    venue: str = ""
    day: date | None = None

    @property
    def target(self) -> str:
        return self.unit or f"{self.venue} on {self.day}"


@dataclass(frozen=True, slots=True)
class AssignmentView:
    id: int
    login: str
    name: str
    role: str
    event_code: str
    unit_id: str | None
    unit_code: str | None
    unit_name: str | None
    start_at: datetime | None
    venue: str | None
    day: date | None
    assigned_by: str
    assigned_at: datetime


@dataclass(frozen=True, slots=True)
class RefusalView:
    refused_at: datetime
    actor_name: str
    login: str | None
    screen: str | None
    kind: str
    reason: str
    client_id: str
    unit_id: str | None
    unit_code: str | None
    unit_name: str | None


def read_schedule(text: str) -> list[ScheduleLine]:
    """The lines of a schedule CSV (a header naming login, unit, venue, day), or
    ScheduleError with every line's problem. Only the file is checked here; `Assignments`
    checks logins, units and venues against the database."""
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header is None:
        raise ScheduleError(["line 1: the file is empty; the first line names the columns"])
    names = [h.strip().lower() for h in header]
    problems = [
        f"line 1: column {name!r} is unknown; the columns are {', '.join(COLUMNS)}"
        for name in names
        if name not in COLUMNS
    ]
    if "login" not in names:
        problems.append("line 1: there is no login column: each line names the scorer's login")
    if "unit" not in names and not {"venue", "day"} <= set(names):
        problems.append("line 1: name a unit column, or venue and day columns (or all three)")
    if problems:
        raise ScheduleError(problems)
    lines: list[ScheduleLine] = []
    for number, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if len(row) != len(names):
            problems.append(f"line {number}: {len(row)} fields; the header has {len(names)}")
            continue
        cells = {name: cell.strip() for name, cell in zip(names, row, strict=True)}
        line, problem = _line(number, cells)
        if problem:
            problems.append(problem)
        elif line is not None:
            lines.append(line)
    if problems:
        raise ScheduleError(problems)
    if not lines:
        raise ScheduleError(["the file has a header but no assignments"])
    return lines


def _line(number: int, cells: dict[str, str]) -> tuple[ScheduleLine | None, str]:
    where = f"line {number}"
    login = cells.get("login", "").lower()
    unit = cells.get("unit", "").upper()
    venue, day_text = cells.get("venue", ""), cells.get("day", "")
    if not login:
        return None, f"{where}, login: empty; give the scorer's login"
    if unit and (venue or day_text):
        return None, f"{where}, unit: give a unit, or a venue and a day, not both"
    if unit:
        return ScheduleLine(number, login, unit=unit), ""
    return _venue_line(number, login, venue, day_text)


def _venue_line(
    number: int, login: str, venue: str, day_text: str
) -> tuple[ScheduleLine | None, str]:
    """A line that assigns a venue's matches on one day."""
    where = f"line {number}"
    if not venue and not day_text:
        return None, f"{where}, unit: empty; give a unit code, or a venue and a day"
    if not venue:
        return None, f"{where}, venue: empty; a day needs its venue"
    if not day_text:
        return None, f"{where}, day: empty; a venue needs its day (YYYY-MM-DD)"
    try:
        day = date.fromisoformat(day_text)
    except ValueError:
        return None, f"{where}, day: {day_text!r} is not a date; write it as YYYY-MM-DD"
    return ScheduleLine(number, login, venue=venue, day=day), ""


class Assignments:
    """Assignments over the people pool; every change is recorded in account_change."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _event(self, conn: asyncpg.Connection, event_code: str | None) -> tuple[str, str]:
        events = {r["code"]: r["id"] for r in await conn.fetch(QUERIES["events"])}
        if event_code:
            if event_code.upper() not in events:
                raise AccountError(f"there is no event {event_code!r}")
            return events[event_code.upper()], event_code.upper()
        if len(events) != 1:
            known = ", ".join(sorted(events)) or "none yet"
            raise AccountError(f"name the event: there are {len(events)} ({known})")
        (code, event_id), *_ = events.items()
        return event_id, code

    async def check(
        self,
        conn: asyncpg.Connection,
        event_id: str,
        event_code: str,
        lines: Iterable[ScheduleLine],
    ) -> tuple[dict[str, asyncpg.Record], dict[str, asyncpg.Record]]:
        """The accounts and units the lines name, or ScheduleError naming each bad line."""
        lines = list(lines)
        accounts = {
            r["login"]: r
            for r in await conn.fetch(QUERIES["scorer_logins"], sorted({x.login for x in lines}))
        }
        units = {
            r["code"]: r
            for r in await conn.fetch(
                QUERIES["units_by_code"], event_id, sorted({x.unit for x in lines if x.unit})
            )
        }
        venues: dict[str, set[date]] = {
            r["venue"]: set(r["days"]) for r in await conn.fetch(QUERIES["venue_days"], event_id)
        }
        problems = []
        for x in lines:
            where = f"line {x.line}"
            account = accounts.get(x.login)
            if account is None:
                problems.append(f"{where}, login: there is no account {x.login!r}")
            elif account["role"] not in _MAY_SCORE:
                problems.append(
                    f"{where}, login: {x.login!r} is a {account['role']}, who cannot score; "
                    "make it a scorer first"
                )
            elif account["disabled"]:
                problems.append(f"{where}, login: {x.login!r} is turned off; turn it on first")
            if x.unit and x.unit not in units:
                problems.append(f"{where}, unit: {event_code} has no unit {x.unit!r}")
            if x.venue and x.venue not in venues:
                problems.append(
                    f"{where}, venue: no unit of {event_code} is at {x.venue!r} "
                    "(it is spelt as in the schedule)"
                )
            elif x.venue and x.day not in venues[x.venue]:
                problems.append(f"{where}, day: no unit at {x.venue!r} starts on {x.day}")
        if problems:
            raise ScheduleError(problems)
        return accounts, units

    async def load_schedule(
        self,
        lines: Sequence[ScheduleLine],
        *,
        event_code: str | None = None,
        by: Changer = COMMAND_LINE,
    ) -> str:
        """Every line checked, then written in one transaction: each match and each venue's
        day the file names is scored by exactly the logins the file gives it (earlier scorers
        of those are replaced); matches and days it does not name are left as they are."""
        async with self._pool.acquire() as conn, conn.transaction():
            event_id, code = await self._event(conn, event_code)
            accounts, units = await self.check(conn, event_id, code, lines)
            units_named = {x.unit for x in lines if x.unit}
            days_named = {(x.venue, x.day) for x in lines if x.venue}
            for unit in sorted(units_named):
                await conn.fetch(QUERIES["clear_unit"], units[unit]["id"])
            for venue, day in sorted(days_named, key=str):
                await conn.fetch(
                    *QUERIES.bind("clear_venue_day", event_id=event_id, venue=venue, day=day)
                )
            for x in lines:
                await self._insert(conn, event_id, accounts[x.login]["id"], x, units, by)
        return (
            f"{len(lines)} assignment(s) of {code}: {len(units_named)} match(es) and "
            f"{len(days_named)} venue day(s) set"
        )

    async def _insert(
        self,
        conn: asyncpg.Connection,
        event_id: str,
        account_id: str,
        x: ScheduleLine,
        units: dict[str, asyncpg.Record],
        by: Changer,
    ) -> None:
        if x.unit:
            await conn.execute(
                *QUERIES.bind(
                    "assign_unit",
                    account_id=account_id,
                    event_id=event_id,
                    unit_id=units[x.unit]["id"],
                    assigned_by=by[0],
                )
            )
        else:
            await conn.execute(
                *QUERIES.bind(
                    "assign_venue_day",
                    account_id=account_id,
                    event_id=event_id,
                    venue=x.venue,
                    day=x.day,
                    assigned_by=by[0],
                )
            )
        await conn.execute(
            *QUERIES.bind(
                "record_change",
                login=x.login,
                change=f"assigned {x.target}",
                by_name=by[0],
                by_source=by[1],
            )
        )

    async def assign(
        self,
        login: str,
        *,
        unit: str = "",
        venue: str = "",
        day: str = "",
        event_code: str | None = None,
        hand_over: bool = False,
        by: Changer = COMMAND_LINE,
    ) -> str:
        """One assignment from the console. With `hand_over`, the match's (or the venue's
        day's) other scorers lose it: their queued actions for it are then refused."""
        line, problem = _line(
            1, {"login": login.strip(), "unit": unit, "venue": venue.strip(), "day": day.strip()}
        )
        if line is None:
            raise AccountError(problem.removeprefix("line 1, "))
        async with self._pool.acquire() as conn, conn.transaction():
            event_id, code = await self._event(conn, event_code)
            try:
                accounts, units = await self.check(conn, event_id, code, [line])
            except ScheduleError as exc:
                raise AccountError(
                    "; ".join(p.removeprefix("line 1, ") for p in exc.problems)
                ) from None
            dropped: list[str] = []
            if hand_over and line.unit:
                dropped = [
                    r[0] for r in await conn.fetch(QUERIES["clear_unit"], units[line.unit]["id"])
                ]
            elif hand_over:
                dropped = [
                    r[0]
                    for r in await conn.fetch(
                        *QUERIES.bind(
                            "clear_venue_day", event_id=event_id, venue=line.venue, day=line.day
                        )
                    )
                ]
            account = accounts[line.login]
            await self._insert(conn, event_id, account["id"], line, units, by)
            others = len([d for d in dropped if d != account["id"]])
        what = units[line.unit]["name"] if line.unit else line.target
        said = f"{account['name']} ({line.login}) scores {what}"
        if hand_over:
            said += (
                f"; handed over from {others} other scorer(s)" if others else "; no one else does"
            )
        return said

    async def remove(self, assignment_id: int, *, by: Changer = COMMAND_LINE) -> str:
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(QUERIES["remove_assignment"], assignment_id)
            if row is None:
                raise AccountError(f"there is no assignment {assignment_id} (removed already?)")
            target = row["unit_code"] or f"{row['venue']} on {row['day']}"
            await conn.execute(
                *QUERIES.bind(
                    "record_change",
                    login=row["login"],
                    change=f"unassigned {target}",
                    by_name=by[0],
                    by_source=by[1],
                )
            )
        return f"{row['login']} no longer scores {target}"

    async def overview(self, limit: int = 500) -> list[AssignmentView]:
        return [
            AssignmentView(**dict(r)) for r in await self._pool.fetch(QUERIES["assignments"], limit)
        ]

    async def refusals(self, limit: int = 20) -> list[RefusalView]:
        return [RefusalView(**dict(r)) for r in await self._pool.fetch(QUERIES["refusals"], limit)]

    async def scorers(self) -> list[dict[str, Any]]:
        return [dict(r) for r in await self._pool.fetch(QUERIES["scorer_accounts"])]

    async def events(self) -> list[str]:
        return [r["code"] for r in await self._pool.fetch(QUERIES["events"])]
