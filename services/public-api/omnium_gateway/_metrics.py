"""Counters every worker process writes to its own slice of shared memory; /metrics sums them."""

from __future__ import annotations

from collections.abc import Sequence
from multiprocessing.sharedctypes import RawArray
from typing import Any

from omnium_gateway._reads import TTL_CLASSES

ROUTES = (
    "events",
    "disciplines",
    "schedule",
    "unit",
    "medals",
    "openapi",
    "healthz",
    "readyz",
    "metrics",
    "extra",
    "unknown",
)
CODES = (200, 304, 400, 401, 404, 405, 429, 500, 503)
CACHE_RESULTS = ("HIT", "MISS", "STALE")
SINGLE = (
    ("omnium_gateway_db_errors_total", "Database reads that failed or timed out."),
    ("omnium_gateway_redis_errors_total", "Redis calls that failed; the worker read around it."),
    ("omnium_gateway_invalidations_total", "Cache groups dropped by outbox invalidations."),
    (
        "omnium_gateway_outbox_rows_total",
        "Outbox rows the elected relay turned into invalidations.",
    ),
)


class Metrics:
    """Fixed slots (no labels invented at run time), one slice per worker: no locks needed."""

    def __init__(self, workers: int = 1, shared: Any = None) -> None:
        self.slots: dict[tuple[str, str], int] = {}
        for route in ROUTES:
            for code in CODES:
                self._slot("requests", f'route="{route}",code="{code}"')
        for result in CACHE_RESULTS:
            self._slot("cache", f'result="{result}"')
        for ttl_class in TTL_CLASSES:
            self._slot("db_reads", f'ttl_class="{ttl_class}"')
        for name, _ in SINGLE:
            self._slot(name, "")
        self.width = len(self.slots)
        self.workers = workers
        self.values: Any = shared if shared is not None else RawArray("d", self.width * workers)
        self.base = 0
        self._request = {
            (route, code): self.slots[("requests", f'route="{route}",code="{code}"')]
            for route in ROUTES
            for code in CODES
        }
        self._cache = {r: self.slots[("cache", f'result="{r}"')] for r in CACHE_RESULTS}

    def _slot(self, name: str, labels: str) -> None:
        self.slots[(name, labels)] = len(self.slots)

    def for_worker(self, index: int) -> Metrics:
        """The view worker `index` writes through (same shared memory)."""
        view = Metrics(self.workers, self.values)
        view.base = index * self.width
        return view

    def request(self, route: str, code: int) -> None:
        slot = self._request.get((route, code))
        if slot is not None:
            self.values[self.base + slot] += 1

    def cache(self, result: str) -> None:
        self.values[self.base + self._cache[result]] += 1

    def db_read(self, ttl_class: str) -> None:
        self.values[self.base + self.slots[("db_reads", f'ttl_class="{ttl_class}"')]] += 1

    def add(self, name: str, amount: float = 1) -> None:
        self.values[self.base + self.slots[(name, "")]] += amount

    def total(self, name: str, labels: str = "") -> float:
        slot = self.slots[(name, labels)]
        return float(sum(self.values[w * self.width + slot] for w in range(self.workers)))

    def db_reads(self) -> float:
        return sum(self.total("db_reads", f'ttl_class="{c}"') for c in TTL_CLASSES)

    def render(self, gauges: Sequence[tuple[str, str, float]] = ()) -> str:
        """Prometheus text format, summed over every worker."""
        lines = [
            "# HELP omnium_gateway_requests_total Requests answered, by route and status.",
            "# TYPE omnium_gateway_requests_total counter",
        ]
        for (name, labels), _ in self.slots.items():
            if name == "requests" and (value := self.total(name, labels)):
                lines.append(f"omnium_gateway_requests_total{{{labels}}} {value:.0f}")
        lines += [
            "# HELP omnium_gateway_cache_total Cached reads by X-Cache result.",
            "# TYPE omnium_gateway_cache_total counter",
        ]
        for result in CACHE_RESULTS:
            labels = f'result="{result}"'
            lines.append(
                f"omnium_gateway_cache_total{{{labels}}} {self.total('cache', labels):.0f}"
            )
        lines += [
            "# HELP omnium_gateway_db_reads_total Database reads made to fill the cache.",
            "# TYPE omnium_gateway_db_reads_total counter",
        ]
        for ttl_class in TTL_CLASSES:
            labels = f'ttl_class="{ttl_class}"'
            value = self.total("db_reads", labels)
            lines.append(f"omnium_gateway_db_reads_total{{{labels}}} {value:.0f}")
        for name, doc in SINGLE:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter"]
            lines.append(f"{name} {self.total(name):.0f}")
        for name, doc, value in gauges:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name} {value:g}"]
        return "\n".join(lines) + "\n"
