"""Reading Scout over HTTP: runs and pages, with timeouts, tries and limits."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from omnium_outbound import AnswerTooLarge, OutboundRefused, outbound_client, read_limited, redacted
from omnium_settings import Settings

log = logging.getLogger(__name__)

#: Scout's run and job ids as we take them (the simulator's are like
#: 6b0f5b0801-000001 and schedule): letters, digits, _ and -, at most 64. Nothing else reaches a
#: URL, so a ring naming run "../jobs/x" cannot send our call elsewhere on Scout.
SCOUT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


_ANSWER_SETTING = "OMNIUM_OUTBOUND_ANSWER_MAX_BYTES"
_PAGE_SETTING = "OMNIUM_SCOUT_PAGE_SIZE × OMNIUM_SCOUT_ROW_MAX_BYTES"


def _part(value: str) -> str:
    """A value placed in a URL path: quoted whole, so it stays one segment whatever it holds."""
    return quote(value, safe="")


class ScoutError(Exception):
    """Scout could not be read, or sent something we cannot use. The message says which."""


@dataclass(frozen=True, slots=True)
class ScoutRun:
    id: str
    job: str
    status: str | None  # "passed" or "failed", as Scout reported it; None when unread
    reason: str | None
    row_count: int | None
    finished_at: datetime | None
    build: str | None  # "all", "day" or "page"
    day: str | None

    @classmethod
    def unread(cls, run_id: str, job: str) -> ScoutRun:
        """A run known only by its id (the doorbell named it), for the record when Scout
        could not be read."""
        return cls(run_id, job, None, None, None, None, None, None)

    @classmethod
    def from_json(cls, data: object) -> ScoutRun:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise ScoutError(f"Scout sent a run without an id: {str(data)[:200]}")
        status = data.get("status")
        if status not in ("passed", "failed"):
            raise ScoutError(
                f"Scout's run {data['id']} has status {status!r}, not passed or failed"
            )
        finished = data.get("finishedAt")
        try:
            finished_at = datetime.fromisoformat(finished) if finished else None
        except (TypeError, ValueError):
            raise ScoutError(f"Scout's run {data['id']} has finishedAt {finished!r}") from None
        row_count = data.get("rowCount")
        if not isinstance(row_count, int) or row_count < 0:
            raise ScoutError(f"Scout's run {data['id']} has rowCount {row_count!r}")
        build = data.get("build") or "all"
        if build not in ("all", "day", "page"):
            raise ScoutError(f"Scout's run {data['id']} has build {build!r}")
        return cls(
            id=data["id"],
            job=str(data.get("job") or ""),
            status=status,
            reason=data.get("reason"),
            row_count=row_count,
            finished_at=finished_at,
            build=build,
            day=data.get("day"),
        )


@dataclass(frozen=True, slots=True)
class ScoutPage:
    """One page of a run's rows as Scout sent it."""

    offset: int
    digest: bytes  # of the page's bytes (page_digest)
    count: int
    items: list[object] | None  # None: the same bytes were read and checked before; not decoded
    body: bytes = b""  # kept only while items is None, for decoded() should it be needed

    def decoded(self) -> list[object]:
        """The page's rows, decoded now if they were not when read."""
        if self.items is not None:
            return self.items
        data = json.loads(self.body)
        items: list[object] = data["items"]  # checked when these bytes were first read
        return items


def page_digest(body: bytes) -> bytes:
    """A page's bytes in 16: the same bytes, the same digest (blake2b, so no collision to fear)."""
    return hashlib.blake2b(body, digest_size=16).digest()


class ScoutClient:
    """One per process; its HTTP connections are reused across runs and integrations."""

    def __init__(self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None):
        self.settings = settings
        timeout = httpx.Timeout(
            settings.imports.scout_timeout_seconds,
            connect=settings.imports.scout_connect_timeout_seconds,
        )
        if transport is None:
            # Scout's address is checked on each connection (omnium_outbound).
            self._http = outbound_client(settings, timeout=timeout)
        else:
            self._http = httpx.AsyncClient(timeout=timeout, transport=transport)

    async def close(self) -> None:
        await self._http.aclose()

    async def newest_run(self, base_url: str, job: str) -> ScoutRun | None:
        """Scout's newest run of the job, whatever its status: a failed one must be seen."""
        data = await self._get_json(f"{_base(base_url)}/v1/jobs/{_part(job)}/runs", {"limit": "1"})
        runs = data.get("runs") if isinstance(data, dict) else None
        if not isinstance(runs, list):
            raise ScoutError(f"Scout's list of runs of job {job} has no 'runs' list")
        return ScoutRun.from_json(runs[0]) if runs else None

    async def run(self, base_url: str, run_id: str) -> ScoutRun:
        url = f"{_base(base_url)}/v1/runs/{_part(run_id)}"
        return ScoutRun.from_json(await self._get_json(url))

    async def items(self, base_url: str, run: ScoutRun) -> list[object]:
        """Every row of the run, page by page, with no database transaction open."""
        pages = await self.pages(base_url, run)
        return [item for page in pages for item in page.items or ()]

    async def pages(
        self, base_url: str, run: ScoutRun, seen: Mapping[bytes, int] | None = None
    ) -> list[ScoutPage]:
        """Every page of the run, in order, with no database transaction open.

        `seen` holds the digests of pages read and checked before, with their row counts: a
        page whose bytes are one of them is not decoded again (its `items` is None), which is
        what lets the fast path skip a page before mapping (see _pages.py). Every other page
        is decoded and checked here, so a run with a bad page fails before anything is written.
        """
        page, limit = self.settings.imports.scout_page_size, self.settings.imports.scout_max_rows
        if run.row_count is not None and run.row_count > limit:
            raise ScoutError(
                f"Scout's run {run.id} has {run.row_count:,} rows; at most {limit:,} are read. "
                "Nothing from this run was written."
            )
        url = f"{_base(base_url)}/v1/runs/{_part(run.id)}/items"
        seen = seen or {}
        # Where the run's row count says a next page is there, it is asked for while this one
        # is read and decoded: Scout makes one page while we take in the other.
        in_flight: deque[tuple[int, asyncio.Future[bytes]]] = deque()
        next_offset = 0

        def ask() -> None:
            nonlocal next_offset
            known = run.row_count if run.row_count is not None else -1
            while not in_flight or (len(in_flight) < 2 and next_offset <= known):
                query = {"offset": str(next_offset), "limit": str(page)}
                in_flight.append(
                    (next_offset, asyncio.ensure_future(self._get(url, query, page=True)))
                )
                next_offset += page

        pages: list[ScoutPage] = []
        rows = 0
        try:
            ask()
            while True:
                offset, pending = in_flight.popleft()
                body = await pending
                digest = page_digest(body)
                count = seen.get(digest)
                if count is None:
                    items = _page_items(url, body, offset, run, page)
                    count = len(items)
                    pages.append(ScoutPage(offset, digest, count, items))
                else:
                    pages.append(ScoutPage(offset, digest, count, None, body))
                rows += count
                if rows > limit:
                    raise ScoutError(
                        f"Scout's run {run.id} has more than {limit:,} rows; stopped reading. "
                        "Nothing from this run was written."
                    )
                if count < page:
                    break
                ask()
        finally:
            for _, pending in in_flight:
                if pending.done() and not pending.cancelled():
                    pending.exception()  # read, so it is not logged as never retrieved
                pending.cancel()
        if rows != run.row_count:
            raise ScoutError(
                f"Scout said run {run.id} has {run.row_count:,} rows but sent {rows:,}. "
                "Nothing from this run was written."
            )
        return pages

    async def request_page_run(self, base_url: str, job: str, keys: list[str]) -> str:
        """Ask Scout to read these rows' pages again (the settle window); Scout's new run id."""
        url = f"{_base(base_url)}/v1/jobs/{_part(job)}/runs"
        try:
            async with self._http.stream(
                "POST", url, json={"build": "page", "keys": keys}
            ) as response:
                body = await read_limited(
                    response, self.settings.server.outbound_answer_max_bytes, what="Scout"
                )
        except httpx.HTTPError as exc:  # OutboundRefused and AnswerTooLarge among them
            raise ScoutError(f"Scout could not be asked for a page run: {exc}") from None
        if response.status_code >= 300:
            raise ScoutError(f"Scout answered HTTP {response.status_code} to a page run request")
        try:
            run_id = json.loads(body)["id"]
        except (ValueError, KeyError, TypeError):
            raise ScoutError("Scout's answer to a page run request has no run id") from None
        return str(run_id)

    async def _get_json(self, url: str, params: dict[str, str] | None = None) -> Any:
        return _decoded(url, await self._get(url, params))

    async def _get(
        self, url: str, params: dict[str, str] | None = None, page: bool = False
    ) -> bytes:
        """The body of a 200 answer, asking again on a failure that may pass. It is read to
        OMNIUM_OUTBOUND_ANSWER_MAX_BYTES, or for a `page` of rows to the page's bound."""
        tries = self.settings.imports.scout_tries
        wait = self.settings.imports.scout_retry_base_seconds
        limit, setting = self.settings.server.outbound_answer_max_bytes, _ANSWER_SETTING
        if page:
            # A page holds at most scout_page_size rows, each of a bounded size: an answer past
            # that is not a page of Scout's, and is not read to its end.
            imports = self.settings.imports
            limit, setting = imports.scout_page_size * imports.scout_row_max_bytes, _PAGE_SETTING
        # Logs and stored errors show the URL without a user, password or query (a secret).
        shown = redacted(url)
        for attempt in range(1, tries + 1):
            try:
                async with self._http.stream("GET", url, params=params) as response:
                    if response.status_code == 200:
                        return await read_limited(
                            response, limit, what=f"Scout at {shown}", setting=setting
                        )
            except (OutboundRefused, AnswerTooLarge) as exc:
                # Asking again would be refused again, or read as much again.
                raise ScoutError(f"{exc} Nothing from this run was written.") from None
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__} ({exc})" if str(exc) else type(exc).__name__
            else:
                problem = f"HTTP {response.status_code}"
                if response.status_code < 500 and response.status_code != 429:
                    raise ScoutError(
                        f"Scout answered {problem} for {shown}; asking again won't help"
                    )
            if attempt < tries:
                log.info("Scout %s for %s; trying again in %.1f s", problem, shown, wait)
                await asyncio.sleep(wait)
                wait *= 2
        raise ScoutError(f"Scout answered {problem} for {shown}, {tries} times in a row")


def _base(url: str) -> str:
    return url.rstrip("/")


def _decoded(url: str, body: bytes) -> Any:
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ScoutError(
            f"Scout's answer from {redacted(url)} is not JSON. Nothing from this run was written."
        ) from None


def _page_items(url: str, body: bytes, offset: int, run: ScoutRun, page: int) -> list[object]:
    data = _decoded(url, body)
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ScoutError(
            f"Scout's page at offset {offset} of run {run.id} has no 'items' list. "
            "Nothing from this run was written."
        )
    if len(items) > page:
        raise ScoutError(
            f"Scout sent {len(items):,} rows at offset {offset} of run {run.id} when "
            f"asked for {page:,}. Nothing from this run was written."
        )
    return items
