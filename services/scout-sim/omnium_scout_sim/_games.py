"""The simulated Games: generated from a seed, then changed by the replay and the control API."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from omnium_scout_sim._catalog import (
    DISCIPLINES,
    EVENT_CODE,
    EVENT_NAME,
    FIRST_DAY,
    LAST_DAY,
    NOCS,
    TIME_ZONE,
    Measure,
    Score,
)
from omnium_scout_sim._plan import draw_games
from omnium_scout_sim._units import (
    BRONZE,
    CANCELLED,
    GOLD,
    OFFICIAL,
    RESULT_STATUSES,
    RUNNING,
    SILVER,
    Competitor,
    Contestant,
    NotFound,
    Row,
    SimulatorError,
    Unit,
)

_PODIUM = {1: GOLD, 2: SILVER, 3: BRONZE}
_DRAW_SHARE = 0.2  # group matches in sports with draws end level about this often


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
        self.competitors, self.units = draw_games(random.Random(seed))
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
