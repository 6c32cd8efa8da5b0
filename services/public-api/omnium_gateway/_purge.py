"""Shared caches in front of the gateway (Varnish, a CDN) told to drop the groups that changed.

The outbox relay hands over each change's groups; this sends them as Varnish's xkey module takes
them (`PURGE` with `xkey-purge: <groups>`) to every configured cache, in the background, so a
cache that is slow or down never holds up the workers' own invalidations. A purge that fails is
tried again; every purge is sent a second time a moment later, because a worker that had not yet
dropped its own copy could have handed the old one straight back to the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

import httpx

from omnium_gateway._metrics import Metrics
from omnium_settings import Settings

log = logging.getLogger(__name__)

# Groups per request: Varnish refuses request headers over 8 KB by default (http_req_hdr_len).
GROUPS_PER_PURGE = 100
RETRY_SECONDS = 1.0


class SharedCachePurge:
    """Runs in the worker that holds the relay lease; `request` never waits on the network."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.urls = settings.gateway.purge_urls
        self.timeout = settings.gateway.purge_timeout_seconds
        self.repeat = settings.gateway.purge_repeat_seconds
        self.metrics = metrics
        # Per cache, group -> (when to send it, whether that is the repeat).
        self.due: dict[str, dict[str, tuple[float, bool]]] = {url: {} for url in self.urls}
        self._wake = asyncio.Event()
        self.failing: set[str] = set()

    def request(self, groups: Iterable[str]) -> None:
        now = time.monotonic()
        names = list(groups)
        for due in self.due.values():
            for group in names:
                due[group] = (now, False)
        self._wake.set()

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            while True:
                self._wake.clear()
                await asyncio.gather(*(self._send(http, url) for url in self.urls))
                later = [at for due in self.due.values() for at, _ in due.values()]
                wait = max(0.0, min(later) - time.monotonic()) if later else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()

    async def _send(self, http: httpx.AsyncClient, url: str) -> None:
        due = self.due[url]
        now = time.monotonic()
        ready = sorted((group, plan) for group, plan in due.items() if plan[0] <= now)
        for start in range(0, len(ready), GROUPS_PER_PURGE):
            chunk = ready[start : start + GROUPS_PER_PURGE]
            try:
                answer = await http.request(
                    "PURGE", url, headers={"xkey-purge": " ".join(g for g, _ in chunk)}
                )
                answer.raise_for_status()
            except httpx.HTTPError as exc:
                if url not in self.failing:
                    log.warning(
                        "the shared cache at %s did not take a purge (%s); trying again", url, exc
                    )
                    self.failing.add(url)
                self.metrics.add("omnium_gateway_purge_errors")
                retry = time.monotonic() + RETRY_SECONDS
                for group, plan in ready[start:]:
                    if due.get(group) == plan:
                        due[group] = (retry, plan[1])
                return
            if url in self.failing:
                log.info("the shared cache at %s takes purges again", url)
                self.failing.discard(url)
            self.metrics.add("omnium_gateway_purges", len(chunk))
            again = time.monotonic() + self.repeat
            for group, plan in chunk:
                if due.get(group) != plan:
                    continue  # asked for again while this purge was on its way
                if plan[1]:
                    del due[group]
                else:
                    due[group] = (again, True)
