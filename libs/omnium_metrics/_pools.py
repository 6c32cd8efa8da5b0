"""Database pools, read at scrape time: connections in use, idle and callers waiting for one."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import asyncpg
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


def waiting(pool: asyncpg.Pool) -> int:
    """Callers waiting for a connection. asyncpg has no public count: its holders sit in an
    asyncio queue, whose waiting getters are the callers (read only, so a change in asyncpg
    shows as 0 here, never as an error)."""
    queue = getattr(pool, "_queue", None)
    getters = getattr(queue, "_getters", None)
    return sum(1 for g in getters if not g.done()) if getters is not None else 0


class _Pools(Collector):
    def __init__(self) -> None:
        # asyncpg's Pool takes no weak reference: held here until it closes, then let go at the
        # next scrape or watch.
        self.pools: list[tuple[asyncpg.Pool, str]] = []
        self.lock = threading.Lock()

    def prune(self) -> list[tuple[asyncpg.Pool, str]]:
        with self.lock:
            self.pools = [(p, road) for p, road in self.pools if not p.is_closing()]
            return list(self.pools)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        in_use = GaugeMetricFamily(
            "omnium_db_pool_in_use", "Connections handed out now, by road.", labels=["road"]
        )
        idle = GaugeMetricFamily(
            "omnium_db_pool_idle", "Open connections no one holds, by road.", labels=["road"]
        )
        wait = GaugeMetricFamily(
            "omnium_db_pool_waiting",
            "Callers waiting for a connection: the pool is too small or the database slow.",
            labels=["road"],
        )
        size = GaugeMetricFamily(
            "omnium_db_pool_max", "The pool's limit, by road.", labels=["road"]
        )
        totals: dict[str, list[int]] = {}
        for pool, road in self.prune():
            t = totals.setdefault(road, [0, 0, 0, 0])
            t[0] += pool.get_size() - pool.get_idle_size()
            t[1] += pool.get_idle_size()
            t[2] += waiting(pool)
            t[3] += pool.get_max_size()
        for road, (used, free, waits, most) in sorted(totals.items()):
            in_use.add_metric([road], used)
            idle.add_metric([road], free)
            wait.add_metric([road], waits)
            size.add_metric([road], most)
        yield from (in_use, idle, wait, size)


_POOLS = _Pools()
REGISTRY.register(_POOLS)


def watch_pool(pool: asyncpg.Pool, road: str) -> None:
    """Show this pool on the process's /metrics until it is closed."""
    _POOLS.prune()
    with _POOLS.lock:
        _POOLS.pools.append((pool, road))
