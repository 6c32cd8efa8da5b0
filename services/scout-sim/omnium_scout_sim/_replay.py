"""The Games-day replay: a fast clock that starts units, posts results and makes runs as it goes."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Protocol

from omnium_scout_sim._catalog import DISCIPLINES, FIRST_DAY, LAST_DAY
from omnium_scout_sim._games import Games
from omnium_scout_sim._units import (
    CANCELLED,
    RUNNING,
    SCHEDULED,
    UNOFFICIAL,
    SimulatorError,
    Unit,
)

log = logging.getLogger(__name__)

GAMES_OPEN = datetime.combine(FIRST_DAY, time(0, 0))
GAMES_CLOSE = datetime.combine(LAST_DAY, time(23, 59))
_VENUES = {spec.code: spec.venues for spec in DISCIPLINES}
_DELAYS_MINUTES = (15, 30, 45, 60, 90)
_LOOKAHEAD = (timedelta(hours=2), timedelta(hours=26))  # which units a change may touch
_VENUE_CHANGE_SHARE = 0.3  # of changes; the rest move the start time
REPLAY_START = datetime.combine(FIRST_DAY, time(8, 0))


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    seconds_per_hour: float = 30.0  # real seconds for one simulated hour
    schedule_every_seconds: float = 20.0  # real seconds between schedule runs
    tick_seconds: float = 1.0  # real seconds between clock steps
    start_local: datetime = REPLAY_START
    official_after_minutes: int = 15  # simulated minutes from UNOFFICIAL to OFFICIAL
    change_chance: float = 0.25  # per simulated hour: one start time or venue changes
    # Where the clock is kept as it moves: a replay started again goes on from there, so a dev
    # stack restarted does not see Scout take back a day of results (None: not kept).
    state_file: Path | None = None

    def check(self) -> None:
        for name in ("seconds_per_hour", "schedule_every_seconds", "tick_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"replay {name} must be above 0")
        if not GAMES_OPEN <= self.start_local <= GAMES_CLOSE:
            raise ValueError(f"replay start must be within the Games, {FIRST_DAY} to {LAST_DAY}")
        if not 0 <= self.change_chance <= 1:
            raise ValueError("replay change_chance is a share, from 0 to 1")


class _Config(Protocol):
    @property
    def seed(self) -> int: ...

    @property
    def schedule_job(self) -> str: ...

    @property
    def medals_job(self) -> str: ...


class Site(Protocol):
    """What a replay moves: the simulated site's Games (new ones after a reset), read as runs
    of its jobs (the simulator of _simulator.py is one)."""

    @property
    def games(self) -> Games: ...

    @property
    def config(self) -> _Config: ...

    async def make_run(self, job: str) -> object: ...


class Replay:
    """Moves the simulated site through the Games. One task; `stop()` ends it within a tick."""

    def __init__(self, sim: Site, settings: ReplaySettings) -> None:
        settings.check()
        self.sim = sim
        self.settings = settings
        self.paused = False
        self.finished = False
        self.clock = GAMES_OPEN
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Changes the site makes later, on this clock: (moment, order added, what, change).
        self._later: list[tuple[datetime, int, str, Callable[[], object]]] = []
        self._added = itertools.count()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, *, resume: bool = True) -> None:
        """From the start time, or (`resume`) from the clock its state file kept, if later."""
        self.clock = GAMES_OPEN
        self.finished = False
        self._later.clear()
        kept = self._kept_clock() if resume else None
        start = max(self.settings.start_local, kept or self.settings.start_local)
        if kept is not None and kept > self.settings.start_local:
            log.info("replay: goes on from %s, where it was stopped", start.isoformat())
        self.advance_to(start)
        self._keep_clock()
        if self._task is None or self._task.done():
            self._stopping.clear()
            self._task = asyncio.create_task(self._run(), name="scout-replay")

    def restart(self) -> None:
        """After a reset: the same settings, from the start again (the kept clock too)."""
        self.start(resume=False)

    def _kept_clock(self) -> datetime | None:
        path = self.settings.state_file
        if path is None or not path.is_file():
            return None
        try:
            kept = datetime.fromisoformat(path.read_text().strip())
        except ValueError:
            log.warning("replay: %s holds no time; starting from the start time", path)
            return None
        return min(max(kept, GAMES_OPEN), GAMES_CLOSE)

    def _keep_clock(self) -> None:
        path = self.settings.state_file
        if path is None:
            return
        written = path.with_name(path.name + ".new")
        written.write_text(self.clock.isoformat(timespec="seconds") + "\n")
        written.replace(path)  # whole or not at all

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, self.settings.tick_seconds + 5)
            except TimeoutError:
                log.warning("the replay did not stop within a tick; it was cancelled")
            self._task = None

    def to_json(self) -> dict[str, object]:
        return {
            "clock_local": self.clock.isoformat(timespec="seconds"),
            "paused": self.paused,
            "finished": self.finished,
            "running": self._task is not None and not self._task.done(),
            "seconds_per_hour": self.settings.seconds_per_hour,
            "schedule_every_seconds": self.settings.schedule_every_seconds,
        }

    # -- the clock -----------------------------------------------------------------------

    def at(self, moment: datetime, what: str, change: Callable[[], object]) -> None:
        """A change the site makes when this clock reaches `moment` (local time), such as a
        protest decided a day after the result was official: `change` is called then, once,
        after the units of that step are played. `what` names it in the log."""
        if moment.tzinfo is not None:
            raise SimulatorError("the replay clock is local wall-clock time: give no offset")
        heapq.heappush(self._later, (moment, next(self._added), what, change))

    def advance_to(self, moment: datetime) -> None:
        """Move the clock forward and play everything due by then, in one pass."""
        moment = min(moment, GAMES_CLOSE)
        if moment <= self.clock:
            return
        first_hour, last_hour = self._hour(self.clock) + 1, self._hour(moment)
        self.clock = moment
        for hour in range(first_hour, last_hour + 1):
            self._maybe_change(hour)
        for unit in list(self.sim.games.units.values()):
            self._play(unit, moment)
        self._play_later(moment)

    def _play_later(self, now: datetime) -> None:
        while self._later and self._later[0][0] <= now:
            due, _, what, change = heapq.heappop(self._later)
            try:
                change()
            except SimulatorError as exc:  # the unit changed meanwhile: said, and skipped
                log.warning("replay: %s, due %s, could not be made: %s", what, due, exc)
            else:
                log.info("replay: %s (due %s)", what, due.isoformat(timespec="minutes"))

    @staticmethod
    def _hour(moment: datetime) -> int:
        return int((moment - GAMES_OPEN).total_seconds() // 3600)

    def _play(self, unit: Unit, now: datetime) -> None:
        if unit.status == CANCELLED:
            return
        games = self.sim.games
        duration = timedelta(minutes=unit.duration_minutes)
        end = unit.start + duration
        if unit.status == SCHEDULED and unit.start <= now:
            games.post_result(unit.external_id, status=RUNNING)
        if unit.status == RUNNING:
            if now >= end:
                games.post_result(unit.external_id, status=UNOFFICIAL)
            elif now >= unit.start + duration / 2 and unit.progress < 2:
                games.post_result(unit.external_id, status=RUNNING)  # a live update
        official_at = end + timedelta(minutes=self.settings.official_after_minutes)
        if unit.status == UNOFFICIAL and now >= official_at:
            games.mark_official(unit.external_id)

    def _maybe_change(self, hour: int) -> None:
        """Now and then the site moves a start or a venue, as sites do on the day."""
        rng = random.Random(f"{self.sim.config.seed}:change:{hour}")
        if rng.random() >= self.settings.change_chance:
            return
        now = GAMES_OPEN + timedelta(hours=hour)
        soon = [
            u
            for u in self.sim.games.units.values()
            if u.status == SCHEDULED and now + _LOOKAHEAD[0] <= u.start <= now + _LOOKAHEAD[1]
        ]
        if not soon:
            return
        unit = rng.choice(soon)
        venues = [v for v in _VENUES.get(unit.discipline, ()) if v != unit.venue]
        if venues and rng.random() < _VENUE_CHANGE_SHARE:
            self.sim.games.reschedule(unit.external_id, venue=rng.choice(venues))
            log.info("replay: %s moved to %s", unit.external_id, unit.venue)
        else:
            start = unit.start + timedelta(minutes=rng.choice(_DELAYS_MINUTES))
            self.sim.games.reschedule(unit.external_id, start_local=start)
            log.info("replay: %s now starts %s", unit.external_id, unit.start_local)

    async def _run(self) -> None:
        settings = self.settings
        loop = asyncio.get_running_loop()
        step = timedelta(hours=settings.tick_seconds / settings.seconds_per_hour)
        await self._make_runs()
        next_runs = loop.time() + settings.schedule_every_seconds
        while not self.finished:
            try:
                await asyncio.wait_for(self._stopping.wait(), settings.tick_seconds)
                return
            except TimeoutError:
                pass
            if self.paused:
                continue
            try:
                self.advance_to(self.clock + step)
                self._keep_clock()
                if self.clock >= GAMES_CLOSE:
                    self.finished = True
                if self.finished or loop.time() >= next_runs:
                    next_runs = loop.time() + settings.schedule_every_seconds
                    await self._make_runs()
            except Exception:  # one bad step is logged; the replay goes on with the next tick
                log.exception("replay step at %s failed", self.clock)
        log.info("replay finished: the Games are over")

    async def _make_runs(self) -> None:
        # Scout reads each job's pages on its schedule and keeps every read as a run, changed
        # or not: the medal table too, empty before the first final. Reading it only when it
        # changed left the demo's medal integration with no run, "Late", from the first minute.
        sim = self.sim
        await sim.make_run(sim.config.schedule_job)
        await sim.make_run(sim.config.medals_job)
