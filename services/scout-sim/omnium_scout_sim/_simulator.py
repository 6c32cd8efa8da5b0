"""The simulated Scout: the Games, the runs, the faults and the doorbell, driven from Python.

Its HTTP API is built over it in _app.py, and served by `ScoutSimulator` (_server.py)."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from omnium_scout_sim._catalog import FIRST_DAY, LAST_DAY
from omnium_scout_sim._doorbell import Delivery, DoorbellSender, DoorbellTarget, RingAgain
from omnium_scout_sim._faults import Faults
from omnium_scout_sim._games import Games
from omnium_scout_sim._replay import Replay, ReplaySettings
from omnium_scout_sim._runs import BUILDS, Build, Run, RunBook
from omnium_scout_sim._units import NotFound, Row, SimulatorError

log = logging.getLogger(__name__)

DEFAULT_SEED = 2026


@dataclass(frozen=True, slots=True)
class Limits:
    """Scout's numbers, and the simulator's own bounds."""

    page_rows: int = 500  # most rows in one items page
    page_keys: int = 250  # most keys in one page run (Scout's 900 s run limit)
    sample_rows: int = 10  # rows sent with a doorbell
    runs_listed: int = 20  # runs listed when no limit is given
    runs_listed_max: int = 100
    runs_kept_per_job: int = 200  # older runs are forgotten, so memory stays bounded
    deliveries_kept: int = 100
    doorbell_timeout_seconds: float = 5.0
    doorbell_again: RingAgain = field(default_factory=RingAgain)  # not answered: rung again
    stop_grace_seconds: float = 2.0  # on stop, time given to doorbells in flight


@dataclass(frozen=True, slots=True)
class SimulatorConfig:
    seed: int = DEFAULT_SEED
    schedule_job: str = "schedule"
    medals_job: str = "medals"
    doorbells: Mapping[str, DoorbellTarget] = field(default_factory=dict)  # by job id
    limits: Limits = field(default_factory=Limits)


class Scout:
    """The simulated Scout, without its HTTP server (ScoutSimulator serves it).

    Everything the control API does is a method here too, for tests in the same process.
    """

    def __init__(
        self,
        config: SimulatorConfig | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.config = config or SimulatorConfig()
        if self.config.schedule_job == self.config.medals_job:
            raise ValueError("the schedule and medals jobs need different ids")
        unknown = set(self.config.doorbells) - set(self.jobs)
        if unknown:
            raise ValueError(f"doorbells name jobs this Scout does not have: {sorted(unknown)}")
        self.limits = self.config.limits
        self._clock = clock or (lambda: datetime.now(UTC))
        self.sender = DoorbellSender(
            timeout_seconds=self.limits.doorbell_timeout_seconds,
            keep=self.limits.deliveries_kept,
            clock=self._clock,
            again=self.limits.doorbell_again,
        )
        self.replay: Replay | None = None
        self._epoch = 0
        self._seed_state()

    def _seed_state(self) -> None:
        self.games = Games(self.config.seed)
        self.runs = RunBook(self.jobs, self.limits.runs_kept_per_job)
        self.faults = Faults()
        self._run_number = 0
        self._epoch += 1
        # Run ids carry the start time, so a restarted simulator never reuses an id omnium
        # already holds and calls "already known".
        self._run_prefix = f"{int(self._clock().timestamp()):x}{self._epoch:02d}"
        self._medals_at_last_run: list[Row] | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def jobs(self) -> tuple[str, str]:
        return (self.config.schedule_job, self.config.medals_job)

    async def stop(self) -> None:
        if self.replay is not None:
            await self.replay.stop()
        await self.sender.close(self.limits.stop_grace_seconds)

    async def reset(self) -> None:
        """Back to the seeded start: units, runs, faults; the replay clock starts again."""
        # Doorbells still ringing for the runs forgotten here are stopped.
        await self.sender.cancel(self.limits.stop_grace_seconds)
        self.sender.deliveries.clear()
        self._seed_state()
        if self.replay is not None:
            self.replay.restart()

    def start_replay(self, settings: ReplaySettings | None = None) -> Replay:
        if self.replay is not None:
            raise RuntimeError("a replay is already attached")
        self.replay = Replay(self, settings or ReplaySettings())
        self.replay.start()
        return self.replay

    # -- runs ----------------------------------------------------------------------------

    async def make_run(
        self,
        job: str,
        *,
        build: str = "all",
        day: date | None = None,
        keys: Sequence[str] | None = None,
        fail_checks: str | None = None,
        finished_at: datetime | None = None,
        wait_doorbell: bool = False,
    ) -> Run:
        """Freeze the job's rows now as a new run, then ring its doorbell (in the background
        unless `wait_doorbell`). `fail_checks` makes a run Scout marked failed, with that reason.
        """
        self.runs.check_job(job)
        rows, build_, day = self._rows_for(job, build, day, keys)
        if build_ == "all" and (short := self.faults.take_short_rows()) is not None:
            rows = rows[:short]
        if job == self.config.medals_job and build_ == "all" and self.faults.take_zero_medals():
            rows = [{**row, "gold": 0, "silver": 0, "bronze": 0, "total": 0} for row in rows]
        if finished_at is not None and finished_at.tzinfo is None:
            raise SimulatorError("finished_at needs a time zone (UTC)")
        self._run_number += 1
        run = Run(
            id=f"{self._run_prefix}-{self._run_number:06d}",
            job=job,
            status="failed" if fail_checks else "passed",
            reason=fail_checks or None,
            row_count=len(rows) + self.faults.take_overclaim(),
            finished_at=finished_at or self._clock(),
            build=build_,
            day=day,
            rows=tuple(rows),
        )
        self.runs.add(run)
        if job == self.config.medals_job:
            self._medals_at_last_run = self.games.medal_table()
        log.info("run %s of %s: %s, %d rows", run.id, job, run.status, run.row_count)
        task = self._ring_later(run)
        if wait_doorbell and task is not None:
            await task
        return run

    def medals_changed(self) -> bool:
        """Whether the medal table differs from the last medals run's."""
        return self.games.medal_table() != (self._medals_at_last_run or [])

    def _rows_for(
        self, job: str, build: str, day: date | None, keys: Sequence[str] | None
    ) -> tuple[list[Row], Build, date | None]:
        self._check_build(build, day, keys)
        if job == self.config.medals_job:
            table = self.games.medal_table()
            if build == "page":
                wanted = set(keys or ())
                return [row for row in table if row["noc"] in wanted], "page", None
            if build == "day":
                raise SimulatorError("the medal table is not built by day; use 'all' or 'page'")
            return list(table), "all", None
        if build == "page":
            return self.games.rows_for(keys or ()), "page", None
        if build == "day":
            return self.games.listed_rows(day), "day", day
        return self.games.listed_rows(), "all", None

    def _check_build(self, build: str, day: date | None, keys: Sequence[str] | None) -> None:
        """A run's build and the day or keys it needs, as the control API sends them."""
        if build not in BUILDS:
            raise SimulatorError(f"build must be one of {', '.join(BUILDS)}, not {build!r}")
        if build == "page":
            if keys is None or not isinstance(keys, list | tuple):
                raise SimulatorError("a page run needs keys: a list of ids to read again")
            if len(keys) > self.limits.page_keys:
                raise SimulatorError(
                    f"a page run takes at most {self.limits.page_keys} keys; {len(keys)} were sent"
                )
            if not all(isinstance(k, str) for k in keys):
                raise SimulatorError("keys must be strings")
        elif keys is not None:
            raise SimulatorError("keys go only with build 'page'")
        if build == "day":
            if day is None:
                raise SimulatorError("a day run needs a day, like '2026-09-21'")
            if not FIRST_DAY <= day <= LAST_DAY:
                raise SimulatorError(f"day must be a Games day, {FIRST_DAY} to {LAST_DAY}")
        elif day is not None:
            raise SimulatorError("a day goes only with build 'day'")

    def _ring_later(self, run: Run) -> asyncio.Task[Delivery] | None:
        target = self.config.doorbells.get(run.job)
        if target is None or self.faults.doorbell_muted:
            return None
        return self.sender.send_later(
            target,
            run,
            sample_rows=self.limits.sample_rows,
            wrong_signature=self.faults.take_bad_signature(),
        )

    async def ring(self, run_id: str) -> Delivery:
        """Ring the doorbell for a run again (omnium should answer that it knows the run)."""
        run = self.runs.get(run_id)
        target = self.config.doorbells.get(run.job)
        if target is None:
            raise SimulatorError(f"no doorbell is configured for job {run.job!r}")
        return await self.sender.send(
            target,
            run,
            sample_rows=self.limits.sample_rows,
            wrong_signature=self.faults.take_bad_signature(),
        )

    async def wait_for_doorbells(self, seconds: float = 10.0) -> None:
        """Wait for doorbells sent in the background (tests use this before looking)."""
        await self.sender.drain(seconds)

    @property
    def deliveries(self) -> list[Delivery]:
        return list(self.sender.deliveries)

    # -- the site changing ---------------------------------------------------------------

    # Rows from the Games are shared with the runs that froze them, so callers get copies.

    def unit(self, external_id: str) -> Row:
        return copy.deepcopy(self.games.row(external_id))

    def post_result(
        self,
        external_id: str,
        *,
        status: str = "RUNNING",
        competitors: Sequence[Mapping[str, object]] | None = None,
    ) -> Row:
        return copy.deepcopy(
            self.games.post_result(external_id, status=status, competitors=competitors)
        )

    def mark_official(
        self, external_id: str, competitors: Sequence[Mapping[str, object]] | None = None
    ) -> Row:
        return copy.deepcopy(self.games.mark_official(external_id, competitors))

    def reschedule(
        self, external_id: str, *, start_local: datetime | None = None, venue: str | None = None
    ) -> Row:
        return copy.deepcopy(
            self.games.reschedule(external_id, start_local=start_local, venue=venue)
        )

    def disqualify(self, external_id: str, competitor_id: str) -> Row:
        return copy.deepcopy(self.games.disqualify(external_id, competitor_id))

    def cancel(self, external_id: str) -> Row:
        return copy.deepcopy(self.games.cancel(external_id))

    def drop(self, external_id: str) -> Row:
        return copy.deepcopy(self.games.drop(external_id))

    def restore(self, external_id: str) -> Row:
        return copy.deepcopy(self.games.restore(external_id))

    def swap_competitor(
        self,
        external_id: str,
        *,
        order: int,
        competitor_id: str,
        name: str | None = None,
        noc: str | None = None,
    ) -> Row:
        return copy.deepcopy(
            self.games.swap_competitor(
                external_id, order=order, competitor_id=competitor_id, name=name, noc=noc
            )
        )

    def copy_unit(
        self,
        external_id: str,
        *,
        start_local: datetime | None = None,
        venue: str | None = None,
        unit_name: str | None = None,
    ) -> Row:
        return copy.deepcopy(
            self.games.copy_unit(
                external_id, start_local=start_local, venue=venue, unit_name=unit_name
            )
        )

    def medal_table(self) -> list[Row]:
        return copy.deepcopy(self.games.medal_table())

    # -- faults (see Faults for the rules) -----------------------------------------------

    def fail_next(self, count: int, *, path_prefix: str | None = None, status: int = 500) -> None:
        self.faults.fail_next(count, path_prefix=path_prefix, status=status)

    def slow_next(self, count: int, seconds: float, *, path_prefix: str | None = None) -> None:
        self.faults.slow_next(count, seconds, path_prefix=path_prefix)

    def malform_next_page(self, kind: str, count: int = 1) -> None:
        self.faults.malform_next_page(kind, count)

    def overclaim_next_run(self, extra: int) -> None:
        self.faults.overclaim_next_run(extra)

    def shorten_next_run(self, rows: int) -> None:
        self.faults.shorten_next_run(rows)

    def zero_next_medal_table(self) -> None:
        self.faults.zero_next_medal_table()

    def mute_doorbell(self, muted: bool = True) -> None:
        self.faults.doorbell_muted = muted

    def sign_next_doorbells_wrongly(self, count: int = 1) -> None:
        self.faults.sign_next_doorbells_wrongly(count)

    def clear_faults(self) -> None:
        self.faults.clear()

    # -- looking at it -------------------------------------------------------------------

    def reference(self) -> dict[str, Any]:
        return {
            **self.games.reference(),
            "scout": {
                "jobs": {"schedule": self.config.schedule_job, "medals": self.config.medals_job},
                "integrations": {
                    job: target.integration_code for job, target in self.config.doorbells.items()
                },
                "pageRows": self.limits.page_rows,
                "pageKeys": self.limits.page_keys,
            },
        }

    def state(self) -> dict[str, object]:
        units = self.games.units.values()
        latest = {job: self.runs.newest(job, limit=1) for job in self.jobs}
        return {
            "seed": self.config.seed,
            "units": {
                "total": len(self.games.units),
                "listed": sum(1 for u in units if u.listed),
                "dropped": [u.external_id for u in units if not u.listed],
                "by_status": dict(sorted(Counter(u.status for u in units).items())),
            },
            "medal_table_top": self.games.medal_table()[:5],
            "runs": {
                job: {
                    "kept": self.runs.count(job),
                    "latest": runs[0].to_json() if runs else None,
                }
                for job, runs in latest.items()
            },
            "faults": self.faults.to_json(),
            "doorbells": {
                "targets": {
                    job: {"endpoint": t.endpoint} for job, t in self.config.doorbells.items()
                },
                "recent": [d.to_json() for d in list(self.sender.deliveries)[-5:]],
            },
            "replay": self.replay.to_json() if self.replay is not None else None,
        }


__all__ = ["Limits", "NotFound", "Scout", "SimulatorConfig", "SimulatorError"]
