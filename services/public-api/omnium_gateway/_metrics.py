"""The gateway's metrics, kept by prometheus_client. Under `serve()` each worker process writes
its own files (prometheus_client's multiprocess mode) and /metrics sums every worker; a gateway
made in-process (`make_app` alone, the tests) keeps them in memory."""

from __future__ import annotations

import os
from bisect import bisect_left

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector

from omnium_gateway._reads import TTL_CLASSES

# prometheus_client's own variable: where every process of a multiprocess group keeps its files.
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

CACHE_RESULTS = ("HIT", "MISS", "STALE")
SINGLE = (
    ("omnium_gateway_db_errors", "Database reads that failed or timed out."),
    ("omnium_gateway_redis_errors", "Redis calls that failed; the worker read around it."),
    (
        "omnium_gateway_redis_busy",
        "Redis calls that found the worker's pool full; the worker read around it.",
    ),
    (
        "omnium_gateway_relay_redis_retries",
        "Outbox relay Redis calls that failed or timed out and were tried again in place.",
    ),
    (
        "omnium_gateway_relay_stops",
        "Times the elected outbox relay gave up its lease on an error and stood again.",
    ),
    ("omnium_gateway_invalidations", "Cache groups dropped by outbox invalidations."),
    ("omnium_gateway_outbox_rows", "Outbox rows the elected relay turned into invalidations."),
    ("omnium_gateway_purges", "Groups a shared cache (Varnish, a CDN) was told to drop."),
    ("omnium_gateway_purge_errors", "Purges a shared cache did not take; each is tried again."),
    (
        "omnium_gateway_live_dropped",
        "Live listeners sent a gap and closed: too slow to keep up with the stream.",
    ),
    (
        "omnium_gateway_live_refused",
        "Live streams answered 503: the worker already carried live_max_streams.",
    ),
)
# Seconds from an entry's XADD (its stream id) to its write to a listener.
LIVE_LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Seconds from a change's save to its invalidation in Redis (the relay's lag).
RELAY_LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# How often a worker hands its request counts to prometheus_client (and so to /metrics).
FLUSH_SECONDS = 1.0
# A cached read answers in well under a millisecond; a database read in a few.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


def use_files(directory: str) -> None:
    """Call in a worker process before its Metrics are made: their values go to files in
    `directory`, which /metrics (any worker, or the parent's metrics port) sums. prometheus_client
    picks its value class when a value is made, from this module global and this variable."""
    os.environ[MULTIPROC_DIR] = directory
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]


def render_registry(directory: str) -> CollectorRegistry:
    """A registry that reads every worker's files in `directory` at each scrape, summed."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return registry


def render_directory(directory: str) -> bytes:
    """Prometheus text for every worker that wrote to `directory`, summed."""
    return generate_latest(render_registry(directory))


class Metrics:
    """One worker's metrics. Labelled children are looked up once and kept: the hot path pays
    one increment, no label lookup."""

    def __init__(self) -> None:
        self.directory = os.environ.get(MULTIPROC_DIR) if _files_in_use() else None
        registry = self.registry = CollectorRegistry()
        self._requests = Counter(
            "omnium_gateway_requests",
            "Requests answered, by route and status.",
            ["route", "code"],
            registry=registry,
        )
        self._seconds = Histogram(
            "omnium_gateway_request_duration_seconds",
            "Seconds to answer a request, by route.",
            ["route"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        cache = Counter(
            "omnium_gateway_cache", "Cached reads by X-Cache result.", ["result"], registry=registry
        )
        self._cache = {r: cache.labels(r) for r in CACHE_RESULTS}
        db_reads = Counter(
            "omnium_gateway_db_reads",
            "Database reads made to fill the cache.",
            ["ttl_class"],
            registry=registry,
        )
        self._db_reads = {c: db_reads.labels(c) for c in TTL_CLASSES}
        self._single = {name: Counter(name, doc, registry=registry) for name, doc in SINGLE}
        self._listeners = Gauge(
            "omnium_gateway_live_listeners",
            "Live SSE streams open now, every worker.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self._lag = Histogram(
            "omnium_gateway_live_lag_seconds",
            "Seconds from an entry's XADD to its write to a listener (fan-out lag, one sample "
            "per write).",
            buckets=LIVE_LAG_BUCKETS,
            registry=registry,
        )
        self._relay_lag = Histogram(
            "omnium_gateway_relay_lag_seconds",
            "Seconds from a change's save to its invalidation in Redis, the oldest change of "
            "each batch the relay published (one sample per batch).",
            buckets=RELAY_LAG_BUCKETS,
            registry=registry,
        )
        self.redis_up = Gauge(
            "omnium_gateway_redis_up",
            "1 when the worker reads through Redis (the lowest over the workers).",
            registry=registry,
            multiprocess_mode="livemin",
        )
        self.local_entries = Gauge(
            "omnium_gateway_local_entries",
            "Responses kept in the workers' memory.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        pool = {
            "in_use": "Database connections handed out now.",
            "idle": "Open database connections no one holds.",
            "waiting": "Reads waiting for a database connection.",
        }
        self.pool = {
            state: Gauge(
                f"omnium_gateway_db_pool_{state}",
                doc,
                registry=registry,
                multiprocess_mode="livesum",
            )
            for state, doc in pool.items()
        }
        self._pending_requests: dict[tuple[str, int], int] = {}
        self._pending_buckets: dict[tuple[str, int], int] = {}
        self._pending_seconds: dict[str, float] = {}
        self._pending_cache = dict.fromkeys(CACHE_RESULTS, 0)

    # -- the hot path ----------------------------------------------------------------------
    # A request only adds to plain dicts here; flush() hands the sums to prometheus_client,
    # whose every increment in multiprocess mode takes a lock, reads the pid and writes the
    # file. The gateway flushes every FLUSH_SECONDS and before each /metrics answer.

    def request(self, route: str, code: int, seconds: float) -> None:
        key = (route, code)
        self._pending_requests[key] = self._pending_requests.get(key, 0) + 1
        slot = (route, bisect_left(REQUEST_BUCKETS, seconds))
        self._pending_buckets[slot] = self._pending_buckets.get(slot, 0) + 1
        self._pending_seconds[route] = self._pending_seconds.get(route, 0.0) + seconds

    def cache(self, result: str) -> None:
        self._pending_cache[result] += 1

    def flush(self) -> None:
        """Hand what the hot path counted to prometheus_client (and so to the files)."""
        requests, self._pending_requests = self._pending_requests, {}
        buckets, self._pending_buckets = self._pending_buckets, {}
        seconds, self._pending_seconds = self._pending_seconds, {}
        for (route, code), n in requests.items():
            self._requests.labels(route, str(code)).inc(n)
        for route, total in seconds.items():
            # prometheus_client observes one value at a time; a histogram child's sum and
            # buckets are its own values (pinned version; test_gateway checks the sums).
            self._seconds.labels(route)._sum.inc(total)
        for (route, index), n in buckets.items():
            child = self._seconds.labels(route)
            # Buckets are kept per bound (not cumulative) and summed at collect time.
            child._buckets[index].inc(n)
        for result, n in self._pending_cache.items():
            if n:
                self._cache[result].inc(n)
                self._pending_cache[result] = 0

    def db_read(self, ttl_class: str) -> None:
        self._db_reads[ttl_class].inc()

    def add(self, name: str, amount: float = 1) -> None:
        self._single[name].inc(amount)

    def relay_lag(self, seconds: float) -> None:
        self._relay_lag.observe(seconds)

    # -- live push (omnium_live.LiveCounters) ----------------------------------------------

    def live_listeners(self, count: int) -> None:
        self._listeners.set(count)

    def live_dropped(self) -> None:
        self.add("omnium_gateway_live_dropped")

    def live_refused(self) -> None:
        self.add("omnium_gateway_live_refused")

    def live_lag(self, seconds: float) -> None:
        self._lag.observe(seconds)

    # -- reading ---------------------------------------------------------------------------

    def value(self, name: str, **labels: str) -> float:
        """This worker's value of one sample (`omnium_gateway_requests_total`, route=..., ...)."""
        self.flush()
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found

    def requests(self, route: str, *codes: int) -> float:
        return sum(
            self.value("omnium_gateway_requests_total", route=route, code=str(c)) for c in codes
        )

    def db_reads(self) -> float:
        return sum(self.value("omnium_gateway_db_reads_total", ttl_class=c) for c in TTL_CLASSES)

    def render(self) -> bytes:
        """Prometheus text: every worker summed when they write files, else this one's. Call
        flush() first, on the worker's own thread."""
        if self.directory:
            return render_directory(self.directory)
        return generate_latest(self.registry)


def _files_in_use() -> bool:
    return bool(getattr(values.ValueClass, "_multiprocess", False))
