"""The Games drawn from a seed: each event's phases, its field, the schedule, and the units
with their ODF Results System Codes."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import NamedTuple

from omnium_scout_sim._catalog import (
    DISCIPLINES,
    FIRST_DAY,
    HOST_NOC,
    NAMES,
    NOC_WEIGHT,
    NOCS,
    DisciplineSpec,
    EventSpec,
    name_region,
)
from omnium_scout_sim._units import Competitor, Contestant, Medals, Unit

RSC_LENGTH = 34
RSC_PATTERN = re.compile(r"^[A-Z0-9-]{34}$")

_DAY_STARTS = time(9, 0)
_DAY_MINUTES = 12 * 60  # sessions run 09:00 to 21:00 local
_MIN_GAP_MINUTES = 5
_GROUP_PAIRS = ((0, 1), (2, 3), (0, 2), (1, 3), (0, 3), (1, 2))
_ROUNDS = {32: ("Round of 32", "R32-"), 16: ("Round of 16", "8FNL"), 8: ("Quarterfinal", "QFNL")}
_PHASE_ORDER = {"group": 0, "round": 1, "heat": 2, "qf": 3, "sf": 4, "bronze": 5, "final": 6}


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


def draw_games(rng: random.Random) -> tuple[dict[str, Competitor], dict[str, Unit]]:
    """Every competitor and unit of the Games, drawn with this random source, by Scout id."""
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
                p.venue = spec.venues[(phase.number - 1) % len(spec.venues) if phase.group else 0]
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
    competitors: dict[str, Competitor] = dict(draw.competitors)
    units: dict[str, Unit] = {}
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
        units[unit.external_id] = unit
    if len({u.rsc for u in units.values()}) != len(units):
        raise AssertionError("two units share an RSC; the catalog names two events alike")
    return competitors, units
