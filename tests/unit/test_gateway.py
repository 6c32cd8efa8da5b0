"""The gateway's pure parts: cache entries, invalidation groups, keys, the document, counters."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client.multiprocess import mark_process_dead
from prometheus_client.parser import text_string_to_metric_families

from omnium_accounts import hash_key
from omnium_gateway import Entry, Gateway, Metrics
from omnium_gateway._cache import Cache, CacheKey
from omnium_gateway._gateway import _etag_matches
from omnium_gateway._limits import Client, RateLimiter, parse_api_keys, quota_headers
from omnium_gateway._metrics import render_directory, use_files
from omnium_gateway._openapi import document
from omnium_gateway._outbox import groups_for
from omnium_gateway._reads import FINAL, LIVE, SCHEDULED, state_of
from omnium_settings import Settings, SettingsError


def test_entry_survives_redis() -> None:
    entry = Entry(404, b'{"error": "x"}\n{}', '"abc"', "negative", 1.5, 31.5, 31.5, 7)
    assert Entry.unpack(entry.pack()) == entry


def test_a_change_drops_exactly_the_groups_it_touches() -> None:
    code = "FBLMEVENT-------------FNL-00000001"
    assert groups_for("unit.changed", "AG2026", code) == {
        "schedule:AG2026",
        f"unit:AG2026:{code}",
    }
    assert "disciplines:AG2026" in groups_for("unit.created", "AG2026", code)
    assert groups_for("medal_row.changed", "AG2026", ":JPN") == {"medals:AG2026"}
    assert "events" in groups_for("event.renamed", "AG2026", None)


def test_state_of_units() -> None:
    assert state_of(["SCHEDULED", "RUNNING", "OFFICIAL"]) == LIVE
    assert state_of(["OFFICIAL", "CANCELLED"]) == FINAL
    assert state_of(["OFFICIAL", "SCHEDULED"]) == SCHEDULED
    assert state_of([]) == SCHEDULED


def test_api_keys_are_read_and_checked() -> None:
    settings = Settings.from_env({}, gateway_api_keys=("ndtv:secret-key-1:5:10", "dh:secret-key-2"))
    clients = parse_api_keys(settings)
    ndtv = clients[hash_key("secret-key-1")]
    assert (ndtv.name, ndtv.rate, ndtv.burst) == ("ndtv", 5.0, 10)
    assert clients[hash_key("secret-key-2")].rate == settings.gateway.key_rate_per_second
    for bad in ("nokey", "x:short", "x:secret-key-3:fast", "x:secret-key-4:0"):
        with pytest.raises(SettingsError):
            parse_api_keys(Settings.from_env({}, gateway_api_keys=(bad,)))


def test_etag_matching() -> None:
    assert _etag_matches('"a"', '"a"')
    assert _etag_matches('"b", W/"a"', '"a"')
    assert _etag_matches("*", '"a"')
    assert not _etag_matches('"b"', '"a"')


class LiveRoutes:
    """What another route set looks like to make_app."""

    def add_routes(self, app: web.Application, gateway: Gateway) -> None:
        del gateway
        app.router.add_get("/v1/events/{event}/live", lambda request: web.Response())

    def openapi(self) -> dict[str, Any]:
        return {
            "paths": {"/v1/events/{event}/live": {"get": {"responses": {"200": {}}}}},
            "components": {"schemas": {"LiveEvent": {"type": "object"}}},
        }


def test_the_document_is_assembled_from_parts() -> None:
    part = LiveRoutes().openapi()
    doc = document([part], anonymous=False)
    assert doc["openapi"] == "3.1.0"
    assert "/v1/events/{event}/schedule" in doc["paths"]
    assert "/v1/events/{event}/live" in doc["paths"]
    assert "LiveEvent" in doc["components"]["schemas"]
    assert doc["security"] == [{"apiKey": []}]
    assert {} in document([], anonymous=True)["security"]


def _worker(directory: str, reads: int, listeners: int) -> None:
    # What a gateway worker does first (omnium_gateway._server): its values go to files.
    use_files(directory)
    metrics = Metrics()
    for _ in range(reads):
        metrics.request("unit", 200, 0.002)
    metrics.db_read("live")
    metrics.live_listeners(listeners)
    metrics.flush()


def test_metrics_sum_every_worker(tmp_path: Path) -> None:
    """Two real worker processes write; /metrics (any of them, or the parent's port) sums."""
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_worker, args=(str(tmp_path), reads, listeners))
        for reads, listeners in ((1, 3), (2, 4))
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    # Listeners summed over the live workers: 7 while both run; the server marks a worker
    # that exits, whose streams are gone with it.
    assert "omnium_gateway_live_listeners 7.0" in render_directory(str(tmp_path)).decode()
    for worker in workers:
        assert worker.pid is not None
        mark_process_dead(worker.pid, str(tmp_path))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(render_directory(str(tmp_path)).decode())
        for s in family.samples
    }
    unit = (("code", "200"), ("route", "unit"))
    assert samples[("omnium_gateway_requests_total", unit)] == 3
    assert samples[("omnium_gateway_request_duration_seconds_count", (("route", "unit"),))] == 3
    assert samples[("omnium_gateway_db_reads_total", (("ttl_class", "live"),))] == 2
    assert samples.get(("omnium_gateway_live_listeners", ()), 0) == 0
    # A worker's own registry, in memory, when none writes files (make_app alone, the tests).
    alone = Metrics()
    for seconds in (0.0004, 0.003, 0.003, 2.0):
        alone.request("unit", 200, seconds)
    alone.cache("HIT")
    assert alone.requests("unit", 200) == 4 and alone.directory is None
    # What the hot path kept, handed over whole: the histogram as observe() would make it.
    histogram = "omnium_gateway_request_duration_seconds"
    assert alone.value(f"{histogram}_count", route="unit") == 4
    assert alone.value(f"{histogram}_sum", route="unit") == pytest.approx(2.0064)
    assert alone.value(f"{histogram}_bucket", route="unit", le="0.0005") == 1
    assert alone.value(f"{histogram}_bucket", route="unit", le="0.005") == 3
    assert alone.value(f"{histogram}_bucket", route="unit", le="1.0") == 3
    assert alone.value(f"{histogram}_bucket", route="unit", le="+Inf") == 4
    assert alone.value("omnium_gateway_cache_total", result="HIT") == 1


async def test_a_worker_s_memory_lets_the_least_recently_used_response_go_first() -> None:
    settings = Settings.from_env({}, gateway_local_max_entries=2)
    cache = Cache(settings, None, Metrics(), lambda: None)

    async def never(*_: Any) -> Any:
        raise AssertionError("served from memory, not read")

    def key(name: str) -> CacheKey:
        return CacheKey(name, "g", never)

    def entry() -> Entry:
        return Entry(200, b"{}", '"e"', "final", 1e12, 1e12, 1e12, 0)

    snapshot = cache._snapshot("g")
    cache._keep(key("a"), entry(), snapshot)
    cache._keep(key("b"), entry(), snapshot)
    await cache.get(key("a"))  # "a" used again: now "b" is the least recently used
    cache._keep(key("c"), entry(), snapshot)
    assert list(cache.local) == ["a", "c"]


async def test_without_redis_a_worker_s_own_bucket_gives_the_quota_it_counts() -> None:
    settings = Settings.from_env({})
    limiter = RateLimiter(settings, None, Cache(settings, None, Metrics(), lambda: None))
    client = Client("ndtv", "key:ndtv", 0.001, 3)
    seen = []
    for _ in range(4):
        wait = await limiter.take(client)
        seen.append((wait is None, quota_headers(client, *limiter.quota(client))["RateLimit"]))
    assert seen == [
        (True, '"key";r=2;t=1000'),
        (True, '"key";r=1;t=2000'),
        (True, '"key";r=0;t=3000'),
        (False, '"key";r=0;t=3000'),
    ]
    assert client.policy == '"key";q=3;w=3000'
    # A bucket that fills faster than a second still names a whole-second window.
    assert Client("fast", "ip:198.51.100.1", 100.0, 10).policy == '"ip";q=10;w=1'
