"""Counters every worker process writes to its own slice of shared memory; /metrics sums them."""

from __future__ import annotations

from bisect import bisect_left
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
    ("omnium_gateway_purges_total", "Groups a shared cache (Varnish, a CDN) was told to drop."),
    (
        "omnium_gateway_purge_errors_total",
        "Purges a shared cache did not take; each is tried again.",
    ),
    (
        "omnium_gateway_live_dropped_total",
        "Live listeners sent a gap and closed: too slow to keep up with the stream.",
    ),
    (
        "omnium_gateway_live_refused_total",
        "Live streams answered 503: the worker already carried live_max_streams.",
    ),
)
LIVE_LISTENERS = "omnium_gateway_live_listeners"
LIVE_LAG = "omnium_gateway_live_lag_seconds"
# Seconds from an entry's XADD (its stream id) to its write to a listener.
LIVE_LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """Fixed slots (no labels invented at run time), one slice per worker: no locks needed."""

    def __init__(self, workers: int = 1, shared: object = None) -> None:
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
        self._slot(LIVE_LISTENERS, "")
        for bucket in (*LIVE_LAG_BUCKETS, "+Inf"):
            self._slot(LIVE_LAG, f'le="{bucket}"')
        self._slot(LIVE_LAG, "sum")
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
        self._lag = [self.slots[(LIVE_LAG, f'le="{b}"')] for b in (*LIVE_LAG_BUCKETS, "+Inf")]

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

    # -- live push (omnium_live.LiveCounters) ------------------------------------------------

    def live_listeners(self, count: int) -> None:
        self.values[self.base + self.slots[(LIVE_LISTENERS, "")]] = count

    def live_dropped(self) -> None:
        self.add("omnium_gateway_live_dropped_total")

    def live_refused(self) -> None:
        self.add("omnium_gateway_live_refused_total")

    def live_lag(self, seconds: float) -> None:
        self.values[self.base + self._lag[bisect_left(LIVE_LAG_BUCKETS, seconds)]] += 1
        self.values[self.base + self.slots[(LIVE_LAG, "sum")]] += seconds

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
        lines += [
            f"# HELP {LIVE_LISTENERS} Live SSE streams open now, every worker.",
            f"# TYPE {LIVE_LISTENERS} gauge",
            f"{LIVE_LISTENERS} {self.total(LIVE_LISTENERS):.0f}",
            f"# HELP {LIVE_LAG} Seconds from an entry's XADD to its write to a listener (fan-out "
            "lag, one sample per write).",
            f"# TYPE {LIVE_LAG} histogram",
        ]
        count = 0.0
        for bucket in (*LIVE_LAG_BUCKETS, "+Inf"):
            count += self.total(LIVE_LAG, f'le="{bucket}"')
            lines.append(f'{LIVE_LAG}_bucket{{le="{bucket}"}} {count:.0f}')
        lines.append(f"{LIVE_LAG}_sum {self.total(LIVE_LAG, 'sum'):.3f}")
        lines.append(f"{LIVE_LAG}_count {count:.0f}")
        for name, doc, value in gauges:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name} {value:g}"]
        return "\n".join(lines) + "\n"
