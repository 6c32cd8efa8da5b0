"""Runs: frozen snapshots of a job's rows, kept newest first, as Scout keeps them."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Literal

from omnium_scout_sim._units import NotFound

Build = Literal["all", "day", "page"]
RunStatus = Literal["passed", "failed"]
BUILDS: tuple[Build, ...] = ("all", "day", "page")
RUN_STATUSES: tuple[RunStatus, ...] = ("passed", "failed")


def utc_text(moment: datetime) -> str:
    """ISO 8601 in UTC with a Z, to the millisecond: '2026-09-21T00:30:00.000Z'."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Run:
    id: str
    job: str
    status: RunStatus
    reason: str | None
    row_count: int  # what the run claims; a fault can make it more than len(rows)
    finished_at: datetime
    build: Build
    day: date | None
    rows: tuple[Mapping[str, object], ...]  # shared with the Games' row cache: never change them

    def to_json(self) -> dict[str, object]:
        run: dict[str, object] = {
            "id": self.id,
            "job": self.job,
            "status": self.status,
        }
        if self.reason is not None:
            run["reason"] = self.reason
        run |= {
            "rowCount": self.row_count,
            "finishedAt": utc_text(self.finished_at),
            "build": self.build,
        }
        if self.day is not None:
            run["day"] = self.day.isoformat()
        return run

    def sample(self, size: int) -> list[Mapping[str, object]]:
        return list(self.rows[:size])


class RunBook:
    """Every job's runs in memory, newest first, at most `keep_per_job` of each."""

    def __init__(self, jobs: Sequence[str], keep_per_job: int) -> None:
        self._by_job: dict[str, deque[Run]] = {job: deque(maxlen=keep_per_job) for job in jobs}
        self._by_id: dict[str, Run] = {}

    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(self._by_job)

    def check_job(self, job: str) -> None:
        if job not in self._by_job:
            raise NotFound(f"there is no job {job!r}; this Scout has {', '.join(self._by_job)}")

    def add(self, run: Run) -> None:
        self.check_job(run.job)
        runs = self._by_job[run.job]
        if len(runs) == runs.maxlen:
            # The oldest run falls off the end; its id answers 404 from now on, as on Scout.
            self._by_id.pop(runs[-1].id, None)
        runs.appendleft(run)
        self._by_id[run.id] = run

    def get(self, run_id: str) -> Run:
        try:
            return self._by_id[run_id]
        except KeyError:
            raise NotFound(f"there is no run {run_id!r} (or it is too old to be kept)") from None

    def newest(self, job: str, *, status: RunStatus | None = None, limit: int) -> list[Run]:
        self.check_job(job)
        out: list[Run] = []
        for run in self._by_job[job]:
            if status is None or run.status == status:
                out.append(run)
                if len(out) == limit:
                    break
        return out

    def count(self, job: str) -> int:
        return len(self._by_job[job])
