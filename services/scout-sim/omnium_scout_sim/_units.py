"""The simulated Games' records: competitors, units and each competitor's place in a unit, the
statuses and medals the site shows, and the simulator's errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from omnium_scout_sim._catalog import Entry, Measure, Score

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
