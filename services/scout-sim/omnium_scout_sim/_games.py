"""The simulated Games: generated from a seed, then changed by the replay and the control API."""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, Literal, NamedTuple

from omnium_scout_sim._catalog import (
    DISCIPLINES,
    EVENT_CODE,
    EVENT_NAME,
    FIRST_DAY,
    HOST_NOC,
    LAST_DAY,
    NAMES,
    NOC_WEIGHT,
    NOCS,
    TIME_ZONE,
    DisciplineSpec,
    Entry,
    EventSpec,
    Measure,
    Score,
    name_region,
)

Row = dict[str, Any]
Medals = Literal["none", "podium", "bronze"]

SCHEDULED, RUNNING, UNOFFICIAL, OFFICIAL, CANCELLED = (
    "SCHEDULED",
    "RUNNING",
    "UNOFFICIAL",
    "OFFICIAL",
    "CANCELLED",
)
RESULT_STATUSES = (RUNNING, UNOFFICIAL, OFFICIAL)
GOLD, SILVER, BRONZE = "GOLD", "SILVER", "BRONZE"
RSC_LENGTH = 34
RSC_PATTERN = re.compile(r"^[A-Z0-9-]{34}$")

_DAY_STARTS = time(9, 0)
_DAY_MINUTES = 12 * 60  # sessions run 09:00 to 21:00 local
_MIN_GAP_MINUTES = 5
_PODIUM = {1: GOLD, 2: SILVER, 3: BRONZE}
_DRAW_SHARE = 0.2  # group matches in sports with draws end level about this often
_GROUP_PAIRS = ((0, 1), (2, 3), (0, 2), (1, 3), (0, 3), (1, 2))
_ROUNDS = {32: ("Round of 32", "R32-"), 16: ("Round of 16", "8FNL"), 8: ("Quarterfinal", "QFNL")}
_PHASE_ORDER = {"group": 0, "round": 1, "heat": 2, "qf": 3, "sf": 4, "bronze": 5, "final": 6}


class SimulatorError(Exception):
    """Something the simulator was asked to do cannot be done; the message says why."""

    status = 400


class NotFound(SimulatorError):
    status = 404


@dataclass(frozen=True, slots=True)
class Competitor:
    external_id: str
    name: str
    noc: str
    discipline: str
    kind: Entry

    def reference(self) -> Row:
        return {
            "externalId": self.external_id,
            "name": self.name,
            "noc": self.noc,
            "discipline": self.discipline,
            "kind": self.kind,
        }


@dataclass(slots=True)
class Contestant:
    """One competitor's place in one unit."""

    competitor: Competitor
    order: int
    result: str | None = None
    rank: int | None = None
    medal: str | None = None


@dataclass(slots=True)
class Unit:
    external_id: str
    rsc: str
    discipline: str
    event: str
    phase: str
    unit_name: str
    start: datetime  # local wall-clock time in TIME_ZONE, no offset, as the site shows it
    venue: str
    contestants: list[Contestant]
    medals: Medals
    group_stage: bool
    duration_minutes: int
    measure: Measure | None
    score: Score | None
    status: str = SCHEDULED
    listed: bool = True
    progress: int = 0  # how many live updates it has had; varies the invented scores

    @property
    def start_local(self) -> str:
        return self.start.isoformat(timespec="seconds")

    def row(self) -> Row:
        return {
            "externalId": self.external_id,
            "rsc": self.rsc,
            "disciplineCode": self.discipline,
            "event": self.event,
            "phase": self.phase,
            "unitName": self.unit_name,
            "startLocal": self.start_local,
            "venue": self.venue,
            "status": self.status,
            "competitors": [
                {
                    "externalId": c.competitor.external_id,
                    "name": c.competitor.name,
                    "noc": c.competitor.noc,
                    "order": c.order,
                    "result": c.result,
                    "rank": c.rank,
                    "medal": c.medal,
                }
                for c in self.contestants
            ],
        }


@dataclass(slots=True)
class _Planned:
    """A unit before it has a time and a Scout id."""

    spec: DisciplineSpec
    event: EventSpec
    event_index: int
    phase: str
    phase_code: str
    number: int
    order: str  # a key of _PHASE_ORDER
    medals: Medals
    slots: list[int]  # positions in the event's field
    group_stage: bool = False
    unit_name: str = ""
    venue: str = ""
    start: datetime = field(default_factory=lambda: datetime.combine(FIRST_DAY, _DAY_STARTS))


def rsc_code(discipline: str, gender: str, event: str, phase_code: str, number: int) -> str:
    """ODF's Results System Code: discipline 3, gender 1, event 18, phase 4, unit 8."""
    words = event.split(" ", 1)[1] if " " in event else event
    slug = re.sub(r"[^A-Z0-9]", "", words.upper().replace("+", "PLUS"))
    code = f"{discipline}{gender}{slug[:18]:-<18}{phase_code:-<4}{number * 100:06d}--"
    assert len(code) == RSC_LENGTH and RSC_PATTERN.match(code), code
    return code


class _Phase(NamedTuple):
    label: str  # "Heat 2", "Group A", "Final"
    code: str  # the RSC's 4 phase characters
    number: int  # the unit's number within the phase
    order: str  # a key of _PHASE_ORDER
    medals: Medals
    slots: list[int]  # positions in the event's field
    group: bool  # a group-stage game, which may end level


def _phases(event: EventSpec, rng: random.Random) -> tuple[int, list[_Phase]]:
    """An event's field size and its units."""
    out: list[_Phase] = []

    def knockout(top: list[int]) -> None:
        size = len(top)
        while size > 4:
            label, code = _ROUNDS[size]
            for i in range(size // 2):
                out.append(
                    _Phase(
                        label,
                        code,
                        i + 1,
                        "qf" if size == 8 else "round",
                        "none",
                        [top[i], top[size - 1 - i]],
                        False,
                    )
                )
            size //= 2
        out.append(_Phase("Semifinal", "SFNL", 1, "sf", "none", [top[0], top[3]], False))
        out.append(_Phase("Semifinal", "SFNL", 2, "sf", "none", [top[1], top[2]], False))
        out.append(
            _Phase("Bronze Medal Match", "FNL-", 2, "bronze", "bronze", [top[3], top[2]], False)
        )
        out.append(
            _Phase("Gold Medal Match", "FNL-", 1, "final", "podium", [top[0], top[1]], False)
        )

    if event.plan == "groups":
        groups = event.size
        for g in range(groups):
            letter = "ABCDEFGH"[g]
            for n, (a, b) in enumerate(_GROUP_PAIRS, start=1):
                out.append(
                    _Phase(
                        f"Group {letter}",
                        f"GP{letter}-",
                        n,
                        "group",
                        "none",
                        [4 * g + a, 4 * g + b],
                        True,
                    )
                )
        firsts = [4 * g for g in range(groups)]
        seconds = [4 * g + 1 for g in range(groups)]
        thirds = [4 * g + 2 for g in range(groups)]
        top = firsts + seconds + thirds
        knockout(top[: 8 if groups > 2 else 4])
        return 4 * groups, out
    if event.plan == "draw":
        knockout(list(range(event.size)))
        return event.size, out
    if event.plan in ("heats", "qual"):
        sizes = [rng.randint(6, 8) for _ in range(event.size)]
        start = 0
        for n, size in enumerate(sizes, start=1):
            if event.plan == "heats":
                label, code = f"Heat {n}", "HEAT"
            elif event.size == 1:
                label, code = "Qualification", "QUAL"
            else:
                label, code = f"Qualification Group {'ABCDEFGH'[n - 1]}", "QUAL"
            out.append(
                _Phase(label, code, n, "heat", "none", list(range(start, start + size)), False)
            )
            start += size
        final = list(range(min(8, start)))
        out.append(_Phase("Final", "FNL-", 1, "final", "podium", final, False))
        return start, out
    if event.plan == "rounds":
        fleet = list(range(8))
        for n in range(1, event.size + 1):
            out.append(_Phase(f"Race {n}", "RACE", n, "heat", "none", fleet, False))
        out.append(_Phase("Medal Race", "FNL-", 1, "final", "podium", fleet, False))
        return len(fleet), out
    size = rng.randint(6, 8)
    out.append(_Phase("Final", "FNL-", 1, "final", "podium", list(range(size)), False))
    return size, out


class _Draw:
    """Makes competitors: athletes kept in a pool per discipline and gender, teams, pairs."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.competitors: dict[str, Competitor] = {}
        self._pools: dict[tuple[str, str], list[Competitor]] = {}
        self._teams: dict[tuple[str, str, str], Competitor] = {}
        self._counts = {"P": 0, "T": 0, "D": 0}
        self._nocs = list(NOCS)
        self._weights = [NOC_WEIGHT.get(noc, 1) for noc in self._nocs]

    def _next_id(self, kind: str) -> str:
        self._counts[kind] += 1
        width = 5 if kind == "P" else 4
        return f"SC-{kind}-{self._counts[kind]:0{width}d}"

    def _person(self, noc: str) -> str:
        families, given = NAMES[name_region(noc)]
        return f"{self.rng.choice(families)} {self.rng.choice(given)}"

    def _noc(self) -> str:
        return self.rng.choices(self._nocs, self._weights)[0]

    def _distinct_nocs(self, n: int) -> list[str]:
        # Weighted sampling without replacement (Efraimidis-Spirakis); the host always enters.
        keyed = sorted(
            (self.rng.random() ** (1.0 / w), noc)
            for noc, w in zip(self._nocs, self._weights, strict=True)
            if noc != HOST_NOC
        )
        chosen = [HOST_NOC, *(noc for _, noc in keyed[-(n - 1) :])]
        self.rng.shuffle(chosen)
        return chosen

    def _add(self, competitor: Competitor) -> Competitor:
        self.competitors[competitor.external_id] = competitor
        return competitor

    def field(self, discipline: str, event: EventSpec, size: int) -> list[Competitor]:
        if event.entry == "team":
            out = []
            for noc in self._distinct_nocs(size):
                key = (discipline, event.name, noc)
                if key not in self._teams:
                    self._teams[key] = self._add(
                        Competitor(self._next_id("T"), NOCS[noc], noc, discipline, "team")
                    )
                out.append(self._teams[key])
            return out
        if event.entry == "pair":
            out = []
            for _ in range(size):
                noc = self._noc()
                first, second = self._person(noc).split()[0], self._person(noc).split()[0]
                out.append(
                    self._add(
                        Competitor(
                            self._next_id("D"), f"{first} / {second}", noc, discipline, "pair"
                        )
                    )
                )
            return out
        pool = self._pools.setdefault((discipline, event.gender), [])
        # The pool grows by half a field per event, so an athlete enters about two events.
        wanted = max(len(pool), size) + size // 2
        while len(pool) < wanted:
            noc = self._noc()
            pool.append(
                self._add(
                    Competitor(self._next_id("P"), self._person(noc), noc, discipline, "athlete")
                )
            )
        return self.rng.sample(pool, size)


def _spread(spec: DisciplineSpec, planned: list[_Planned]) -> None:
    """Give each unit a day and a time: heats in the morning, finals later, 09:00 to 21:00."""
    days = [
        spec.first_day + timedelta(days=i) for i in range((spec.last_day - spec.first_day).days + 1)
    ]
    by_day: dict[date, list[_Planned]] = {d: [] for d in days}
    if all(p.event.plan == "groups" for p in planned):
        # Tournaments run the whole fortnight: group games first, medal games on the last days.
        ordered = sorted(
            planned, key=lambda p: (_PHASE_ORDER[p.order], p.number, p.phase, p.event_index)
        )
        for i, p in enumerate(ordered):
            by_day[days[i * len(days) // len(ordered)]].append(p)
    else:
        events = max(p.event_index for p in planned) + 1
        for p in planned:
            by_day[days[p.event_index * len(days) // events]].append(p)
    for day, units in by_day.items():
        if not units:
            continue
        units.sort(key=lambda p: (_PHASE_ORDER[p.order], p.event_index, p.phase, p.number))
        room = _DAY_MINUTES // len(units) // _MIN_GAP_MINUTES * _MIN_GAP_MINUTES
        gap = min(spec.slot_minutes, max(_MIN_GAP_MINUTES, room))
        first = datetime.combine(day, _DAY_STARTS)
        for i, p in enumerate(units):
            p.start = first + timedelta(minutes=i * gap)


def _unit_name(p: _Planned) -> str:
    if p.order == "group":
        return f"{p.event.name} {p.phase} Match {p.number}"
    if p.order in ("round", "qf", "sf"):
        return f"{p.event.name} {p.phase} {p.number}"
    return f"{p.event.name} {p.phase}"


def _rounded(measure: Measure, value: float) -> float:
    """The value as the result list shows it, so equal shown results share a place."""
    if measure.shape == "seconds":
        return round(value, 2) if value < 3600 else float(round(value))
    if measure.shape == "metres":
        return round(value, 2)
    if measure.shape == "points":
        return round(value, 1 if measure.base >= 100 else 3)
    return float(round(value))


def _format(measure: Measure, value: float) -> str:
    if measure.shape == "seconds":
        if value < 60:
            return f"{value:.2f}"
        minutes, seconds = divmod(value, 60)
        if minutes < 60:
            return f"{int(minutes)}:{seconds:05.2f}"
        hours, minutes = divmod(int(minutes), 60)
        return f"{hours}:{minutes:02d}:{int(seconds):02d}"
    if measure.shape == "metres":
        return f"{value:.2f}"
    if measure.shape == "points":
        return f"{value:.1f}" if measure.base >= 100 else f"{value:.3f}"
    return str(round(value))


def _competition_ranks(values: Sequence[float], lower_is_better: bool) -> list[int]:
    """Ranks with ties sharing a place (1, 2, 2, 4), as result lists show them."""
    ordered = sorted(values, reverse=not lower_is_better)
    return [ordered.index(v) + 1 for v in values]


class Games:
    """Every unit and competitor of the Games, and the medal table, for one seed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        rng = random.Random(seed)
        draw = _Draw(rng)
        planned: list[tuple[_Planned, list[Competitor]]] = []
        for spec in DISCIPLINES:
            in_discipline: list[tuple[_Planned, list[Competitor]]] = []
            for event_index, event in enumerate(spec.events):
                size, phases = _phases(event, rng)
                entries = draw.field(spec.code, event, size)
                for phase in phases:
                    p = _Planned(spec, event, event_index, *phase)
                    p.unit_name = _unit_name(p)
                    # Group games share the tournament's grounds; knockouts go to the main one.
                    p.venue = spec.venues[
                        (phase.number - 1) % len(spec.venues) if phase.group else 0
                    ]
                    in_discipline.append((p, [entries[s] for s in phase.slots]))
            _spread(spec, [p for p, _ in in_discipline])
            planned.extend(in_discipline)
        planned.sort(
            key=lambda item: (
                item[0].start,
                item[0].spec.code,
                item[0].event_index,
                item[0].phase,
                item[0].number,
            )
        )
        self.competitors: dict[str, Competitor] = dict(draw.competitors)
        self.units: dict[str, Unit] = {}
        for n, (p, entries) in enumerate(planned, start=1):
            unit = Unit(
                external_id=f"SC-{n:06d}",
                rsc=rsc_code(p.spec.code, p.event.gender, p.event.name, p.phase_code, p.number),
                discipline=p.spec.code,
                event=p.event.name,
                phase=p.phase,
                unit_name=p.unit_name,
                start=p.start,
                venue=p.venue,
                contestants=[Contestant(c, order) for order, c in enumerate(entries, start=1)],
                medals=p.medals,
                group_stage=p.group_stage,
                duration_minutes=p.spec.duration_minutes,
                measure=p.event.measure,
                score=p.spec.score,
            )
            self.units[unit.external_id] = unit
        if len({u.rsc for u in self.units.values()}) != len(self.units):
            raise AssertionError("two units share an RSC; the catalog names two events alike")
        self._next_unit = len(self.units) + 1
        self._rows: dict[str, Row] = {}
        self._table: list[Row] | None = None
        self._reference = self._make_reference()

    # -- reading -------------------------------------------------------------------------

    def unit(self, external_id: str) -> Unit:
        try:
            return self.units[external_id]
        except KeyError:
            raise NotFound(f"there is no unit {external_id!r}; ids look like 'SC-000123'") from None

    def row(self, external_id: str) -> Row:
        """The unit as the site shows it. Cached and shared by runs: never change it."""
        row = self._rows.get(external_id)
        if row is None:
            row = self._rows[external_id] = self.unit(external_id).row()
        return row

    def listed_rows(self, day: date | None = None) -> list[Row]:
        return [
            self.row(u.external_id)
            for u in self.units.values()
            if u.listed and (day is None or u.start.date() == day)
        ]

    def rows_for(self, keys: Iterable[str]) -> list[Row]:
        """Rows of the listed units among `keys`, in the order asked (the rest are off the site)."""
        return [
            self.row(k) for k in dict.fromkeys(keys) if k in self.units and self.units[k].listed
        ]

    def medal_table(self) -> list[Row]:
        if self._table is None:
            self._table = self._count_medals()
        return self._table

    def reference(self) -> dict[str, Any]:
        """The Games as seeded: what a dev stack loads before its first import."""
        return copy.deepcopy(self._reference)

    # -- changing ------------------------------------------------------------------------

    def post_result(
        self,
        external_id: str,
        *,
        status: str = RUNNING,
        competitors: Sequence[Mapping[str, Any]] | None = None,
    ) -> Row:
        """Set results and ranks; invented when `competitors` is None. OFFICIAL gives medals."""
        unit = self.unit(external_id)
        if status not in RESULT_STATUSES:
            raise SimulatorError(
                f"status must be one of {', '.join(RESULT_STATUSES)}, not {status!r}"
            )
        if unit.status == CANCELLED:
            raise SimulatorError(f"unit {external_id} is cancelled; it takes no results")
        before = [(c.result, c.rank) for c in unit.contestants]
        try:
            if competitors is not None:
                self._apply_results(unit, competitors)
            elif status == RUNNING:
                self._invent(unit, finished=False)
            elif any(c.rank is None for c in unit.contestants):
                self._invent(unit, finished=True)
            if status == OFFICIAL and any(c.rank is None for c in unit.contestants):
                raise SimulatorError(
                    f"unit {external_id} needs a rank for every competitor to be OFFICIAL"
                )
        except SimulatorError:
            # A refused request leaves the unit as it was, not half changed.
            for c, (result, rank) in zip(unit.contestants, before, strict=True):
                c.result, c.rank = result, rank
            raise
        had_medals = any(c.medal for c in unit.contestants)
        unit.status = status
        for c in unit.contestants:
            c.medal = self._medal_for(unit, c.rank) if status == OFFICIAL else None
        self._touch(unit, medals=had_medals or status == OFFICIAL)
        return self.row(external_id)

    def mark_official(
        self, external_id: str, competitors: Sequence[Mapping[str, Any]] | None = None
    ) -> Row:
        return self.post_result(external_id, status=OFFICIAL, competitors=competitors)

    def reschedule(
        self, external_id: str, *, start_local: datetime | None = None, venue: str | None = None
    ) -> Row:
        unit = self.unit(external_id)
        if start_local is None and venue is None:
            raise SimulatorError("give a new start_local, a new venue, or both")
        if start_local is not None:
            if start_local.tzinfo is not None:
                raise SimulatorError(
                    "start_local is local wall-clock time: give it without an offset"
                )
            unit.start = start_local
        if venue is not None:
            if not venue.strip():
                raise SimulatorError("venue must not be empty")
            unit.venue = venue
        self._touch(unit)
        return self.row(external_id)

    def cancel(self, external_id: str) -> Row:
        unit = self.unit(external_id)
        had_medals = any(c.medal for c in unit.contestants)
        unit.status = CANCELLED
        for c in unit.contestants:
            c.medal = None
        self._touch(unit, medals=had_medals)
        return self.row(external_id)

    def disqualify(self, external_id: str, competitor_id: str) -> Row:
        """A protest upheld after the fact: the competitor's rank and medal are withdrawn and
        the site shows them as null, its result as DSQ. The unit keeps its status."""
        unit = self.unit(external_id)
        slot = next(
            (c for c in unit.contestants if c.competitor.external_id == competitor_id), None
        )
        if slot is None:
            listed = ", ".join(c.competitor.external_id for c in unit.contestants)
            raise SimulatorError(
                f"unit {external_id} has no competitor {competitor_id!r}; it has {listed}"
            )
        had_medal = slot.medal is not None
        slot.result, slot.rank, slot.medal = "DSQ", None, None
        self._touch(unit, medals=had_medal)
        return self.row(external_id)

    def drop(self, external_id: str) -> Row:
        """Take the unit off the site's listing: later runs leave it out."""
        self.unit(external_id).listed = False
        return self.row(external_id)

    def restore(self, external_id: str) -> Row:
        self.unit(external_id).listed = True
        return self.row(external_id)

    def swap_competitor(
        self, external_id: str, *, order: int, competitor_id: str, name: str | None, noc: str | None
    ) -> Row:
        """Put another competitor in a slot; an id never seen before makes a new one (unknown
        to omnium's reference data, on purpose)."""
        unit = self.unit(external_id)
        slot = next((c for c in unit.contestants if c.order == order), None)
        if slot is None:
            orders = ", ".join(str(c.order) for c in unit.contestants)
            raise SimulatorError(
                f"unit {external_id} has no competitor at order {order}; it has {orders}"
            )
        competitor = self.competitors.get(competitor_id)
        if competitor is None:
            if not name or not noc:
                raise SimulatorError(
                    f"{competitor_id!r} is a new competitor: give its name and noc too"
                )
            competitor = Competitor(competitor_id, name, noc, unit.discipline, slot.competitor.kind)
            self.competitors[competitor_id] = competitor
        slot.competitor = competitor
        slot.result = slot.rank = slot.medal = None
        self._touch(unit, medals=True)
        return self.row(external_id)

    def copy_unit(
        self,
        external_id: str,
        *,
        start_local: datetime | None = None,
        venue: str | None = None,
        unit_name: str | None = None,
    ) -> Row:
        """A new unit like another (a replayed match, a unit added late), with a new Scout id and
        RSC; it is not in the seeded reference data, so omnium does not know it yet."""
        source = self.unit(external_id)
        new_id = f"SC-{self._next_unit:06d}"
        self._next_unit += 1
        taken = {u.rsc for u in self.units.values()}
        number = 901  # generated phases never have this many units, so copies cannot clash
        while (rsc := source.rsc[:-8] + f"{number * 100:06d}--") in taken:
            number += 1
        unit = Unit(
            external_id=new_id,
            rsc=rsc,
            discipline=source.discipline,
            event=source.event,
            phase=source.phase,
            unit_name=unit_name or f"{source.unit_name} (Replay)",
            start=start_local or source.start + timedelta(days=1),
            venue=venue or source.venue,
            contestants=[Contestant(c.competitor, c.order) for c in source.contestants],
            medals="none",
            group_stage=source.group_stage,
            duration_minutes=source.duration_minutes,
            measure=source.measure,
            score=source.score,
        )
        self.units[new_id] = unit
        return self.row(new_id)

    # -- inside --------------------------------------------------------------------------

    def _touch(self, unit: Unit, *, medals: bool = False) -> None:
        self._rows.pop(unit.external_id, None)
        if medals:
            self._table = None

    def _apply_results(self, unit: Unit, competitors: Sequence[Mapping[str, Any]]) -> None:
        by_id = {c.competitor.external_id: c for c in unit.contestants}
        for given in competitors:
            cid = given.get("externalId")
            slot = by_id.get(cid) if isinstance(cid, str) else None
            if slot is None:
                raise SimulatorError(
                    f"unit {unit.external_id} has no competitor {cid!r}; it has {', '.join(by_id)}"
                )
            result, rank = given.get("result"), given.get("rank")
            if result is not None and not isinstance(result, str):
                raise SimulatorError(f"result for {cid} must be a string like '10.12' or '3'")
            if rank is not None and (
                not isinstance(rank, int) or isinstance(rank, bool) or rank < 1
            ):
                raise SimulatorError(f"rank for {cid} must be a whole number from 1")
            slot.result, slot.rank = result, rank

    def _rng(self, unit: Unit, what: str) -> random.Random:
        # A string seed is hashed with SHA-512 by `random`, so it is the same in every process.
        return random.Random(f"{self.seed}:{unit.external_id}:{what}:{unit.progress}")

    def _invent(self, unit: Unit, *, finished: bool) -> None:
        rng = self._rng(unit, "final" if finished else "live")
        unit.progress += 1
        if unit.score is not None and len(unit.contestants) == 2:
            self._invent_score(unit, unit.score, rng, finished)
        elif unit.measure is not None:
            self._invent_measure(unit, unit.measure, rng, finished)
        else:  # a head-to-head unit without a score style, or a measure-less event
            for i, c in enumerate(unit.contestants):
                c.result, c.rank = (str(i + 1), i + 1) if finished else (None, None)

    @staticmethod
    def _invent_score(unit: Unit, score: Score, rng: random.Random, finished: bool) -> None:
        a, b = unit.contestants
        if not finished:
            top = max(1, score.win[1] * 2 // 3)
            a.result, b.result = str(rng.randint(0, top)), str(rng.randint(0, top))
            a.rank = b.rank = None
            return
        won = rng.randint(*score.win)
        lost = rng.randint(score.lose[0], max(score.lose[0], min(score.lose[1], won - 1)))
        if score.draws and unit.group_stage and rng.random() < _DRAW_SHARE:
            a.result = b.result = str(lost)
            a.rank = b.rank = 1
            return
        winner, loser = (a, b) if rng.random() < 0.5 else (b, a)
        winner.result, winner.rank = str(won), 1
        loser.result, loser.rank = str(lost), 2

    @staticmethod
    def _invent_measure(unit: Unit, measure: Measure, rng: random.Random, finished: bool) -> None:
        done = unit.contestants if finished else unit.contestants[: len(unit.contestants) // 2]
        if measure.shape == "place":
            places = list(range(1, len(unit.contestants) + 1))
            rng.shuffle(places)
            values = [float(p) for p in places[: len(done)]]
        else:
            sign = 1 if measure.better == "lower" else -1
            values = [
                _rounded(measure, measure.base * (1 + sign * rng.uniform(0, measure.spread)))
                for _ in done
            ]
        ranks = _competition_ranks(values, measure.better == "lower")
        for c in unit.contestants:
            c.result = c.rank = None
        for c, value, rank in zip(done, values, ranks, strict=True):
            c.result = _format(measure, value)
            c.rank = rank if finished else None

    @staticmethod
    def _medal_for(unit: Unit, rank: int | None) -> str | None:
        if rank is None or unit.medals == "none":
            return None
        if unit.medals == "bronze":
            return BRONZE if rank == 1 else None
        return _PODIUM.get(rank)

    def _count_medals(self) -> list[Row]:
        counts: dict[str, list[int]] = {}
        column = {GOLD: 0, SILVER: 1, BRONZE: 2}
        for unit in self.units.values():
            if unit.status != OFFICIAL:
                continue
            for c in unit.contestants:
                if c.medal is not None:
                    counts.setdefault(c.competitor.noc, [0, 0, 0])[column[c.medal]] += 1
        ordered = sorted(
            counts.items(), key=lambda item: (-item[1][0], -item[1][1], -item[1][2], item[0])
        )
        rows: list[Row] = []
        for position, (noc, (gold, silver, bronze)) in enumerate(ordered, start=1):
            tied = rows and (rows[-1]["gold"], rows[-1]["silver"], rows[-1]["bronze"]) == (
                gold,
                silver,
                bronze,
            )
            rank = rows[-1]["rank"] if tied else position
            rows.append(
                {
                    "noc": noc,
                    "gold": gold,
                    "silver": silver,
                    "bronze": bronze,
                    "total": gold + silver + bronze,
                    "rank": rank,
                }
            )
        return rows

    def _make_reference(self) -> dict[str, Any]:
        return {
            "event": {
                "code": EVENT_CODE,
                "name": EVENT_NAME,
                "timeZone": TIME_ZONE,
                "firstDay": FIRST_DAY.isoformat(),
                "lastDay": LAST_DAY.isoformat(),
            },
            "nocs": [{"code": code, "name": name} for code, name in NOCS.items()],
            "disciplines": [
                {
                    "code": spec.code,
                    "name": spec.name,
                    "venues": list(spec.venues),
                    "events": [{"name": e.name, "gender": e.gender} for e in spec.events],
                }
                for spec in DISCIPLINES
            ],
            "competitors": [c.reference() for c in self.competitors.values()],
            "units": [
                {
                    "externalId": u.external_id,
                    "rsc": u.rsc,
                    "disciplineCode": u.discipline,
                    "event": u.event,
                    "phase": u.phase,
                    "unitName": u.unit_name,
                    "startLocal": u.start_local,
                    "venue": u.venue,
                    "competitors": [c.competitor.external_id for c in u.contestants],
                }
                for u in self.units.values()
            ],
        }
