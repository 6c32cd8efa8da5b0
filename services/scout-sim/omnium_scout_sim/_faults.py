"""Faults to switch on: Scout failing, slow, sending bad pages, miscounting, or a bad doorbell."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from omnium_scout_sim._units import SimulatorError

MalformedPage = Literal["not_json", "no_items", "not_objects"]
MALFORMED_PAGES: tuple[MalformedPage, ...] = get_args(MalformedPage)
MAX_DELAY_SECONDS = 300.0  # longer than any client timeout, and still ends
API_PREFIX = "/v1/"


@dataclass(slots=True)
class _Counted:
    """Applies to the next `remaining` Scout API requests whose path starts with the prefix."""

    remaining: int
    path_prefix: str
    value: float  # the HTTP status, or the delay in seconds

    def take(self, path: str) -> bool:
        if self.remaining > 0 and path.startswith(self.path_prefix):
            self.remaining -= 1
            return True
        return False

    def to_json(self, name: str) -> dict[str, object]:
        return {"remaining": self.remaining, "path_prefix": self.path_prefix, name: self.value}


def _count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SimulatorError(f"count must be a whole number from 1, not {count!r}")
    return count


def _prefix(path_prefix: str | None) -> str:
    prefix = path_prefix or API_PREFIX
    if not prefix.startswith(API_PREFIX):
        raise SimulatorError(
            f"path_prefix must start with {API_PREFIX!r}: faults touch Scout's API"
        )
    return prefix


class Faults:
    """What goes wrong next. Each fault is used up as requests or runs meet it."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._errors: list[_Counted] = []
        self._delays: list[_Counted] = []
        self._pages: list[MalformedPage] = []
        self._overclaim = 0
        self._short_rows: int | None = None
        self._zero_medals = False
        self.doorbell_muted = False
        self._bad_signatures = 0

    # -- switching on --------------------------------------------------------------------

    def fail_next(self, count: int, *, path_prefix: str | None = None, status: int = 500) -> None:
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise SimulatorError(f"status must be an HTTP error from 400 to 599, not {status!r}")
        self._errors.append(_Counted(_count(count), _prefix(path_prefix), status))

    def slow_next(self, count: int, seconds: float, *, path_prefix: str | None = None) -> None:
        if not isinstance(seconds, int | float) or not 0 < seconds <= MAX_DELAY_SECONDS:
            raise SimulatorError(f"seconds must be above 0 and at most {MAX_DELAY_SECONDS:g}")
        self._delays.append(_Counted(_count(count), _prefix(path_prefix), float(seconds)))

    def malform_next_page(self, kind: str, count: int = 1) -> None:
        if kind not in MALFORMED_PAGES:
            raise SimulatorError(f"kind must be one of {', '.join(MALFORMED_PAGES)}, not {kind!r}")
        self._pages.extend([kind] * _count(count))

    def overclaim_next_run(self, extra: int) -> None:
        self._overclaim = _count(extra)

    def shorten_next_run(self, rows: int) -> None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise SimulatorError(f"rows must be a whole number from 0, not {rows!r}")
        self._short_rows = rows

    def sign_next_doorbells_wrongly(self, count: int) -> None:
        self._bad_signatures = _count(count)

    def zero_next_medal_table(self) -> None:
        """The next full medal table lists every NOC with no medals (a page read broken)."""
        self._zero_medals = True

    # -- using up ------------------------------------------------------------------------

    def take_error(self, path: str) -> int | None:
        for fault in self._errors:
            if fault.take(path):
                self._errors = [f for f in self._errors if f.remaining]
                return int(fault.value)
        return None

    def take_delay(self, path: str) -> float:
        for fault in self._delays:
            if fault.take(path):
                self._delays = [f for f in self._delays if f.remaining]
                return fault.value
        return 0.0

    def take_malformed_page(self) -> MalformedPage | None:
        return self._pages.pop(0) if self._pages else None

    def take_overclaim(self) -> int:
        extra, self._overclaim = self._overclaim, 0
        return extra

    def take_short_rows(self) -> int | None:
        rows, self._short_rows = self._short_rows, None
        return rows

    def take_zero_medals(self) -> bool:
        zero, self._zero_medals = self._zero_medals, False
        return zero

    def take_bad_signature(self) -> bool:
        if self._bad_signatures:
            self._bad_signatures -= 1
            return True
        return False

    def to_json(self) -> dict[str, object]:
        return {
            "errors": [f.to_json("status") for f in self._errors],
            "slow": [f.to_json("seconds") for f in self._delays],
            "malformed_pages": list(self._pages),
            "overclaim_next_run": self._overclaim,
            "zero_next_medal_table": self._zero_medals,
            "short_next_run": self._short_rows,
            "doorbell_muted": self.doorbell_muted,
            "bad_signatures": self._bad_signatures,
        }
