"""Reading a Scout run's pages: one page is asked for ahead where the run's row count says it is
there. Scout's HTTP here is a handler function behind httpx's MockTransport, so the test can see
which pages were asked for and how many were open at once; the real simulator reads are in
tests/integration/test_imports_failures.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from omnium_imports._scout import ScoutClient, ScoutError, ScoutRun
from omnium_settings import Settings


class Pages:
    """Scout's items endpoint over a list of rows, slow enough that pages overlap."""

    def __init__(self, rows: list[Any], *, extra_at: int | None = None, fail_at: int | None = None):
        self.rows = rows
        self.extra_at = extra_at
        self.fail_at = fail_at
        self.asked: list[int] = []
        self.open = 0
        self.most_open = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        limit = int(request.url.params["limit"])
        self.asked.append(offset)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await asyncio.sleep(0.02)
        finally:
            self.open -= 1
        if offset == self.fail_at:
            return httpx.Response(404, text="gone")
        items = self.rows[offset : offset + limit]
        if offset == self.extra_at:
            items = [*items, {"n": "extra"}]
        return httpx.Response(200, content=json.dumps({"items": items}).encode())


def _run(row_count: int) -> ScoutRun:
    return ScoutRun.from_json(
        {"id": "r1", "status": "passed", "rowCount": row_count, "finishedAt": None}
    )


async def _read(pages: Pages, row_count: int, page: int = 2) -> list[Any]:
    settings = Settings.from_env({}, scout_page_size=page, scout_tries=1)
    client = ScoutClient(settings, transport=httpx.MockTransport(pages))
    try:
        return await client.items("http://scout.test", _run(row_count))
    finally:
        await client.close()


async def test_pages_come_in_order_with_one_asked_for_ahead() -> None:
    rows = [{"n": i} for i in range(7)]
    pages = Pages(rows)
    assert await _read(pages, 7) == rows
    assert pages.asked == [0, 2, 4, 6]
    assert pages.most_open == 2


async def test_a_run_of_whole_pages_ends_on_the_empty_page_after_them() -> None:
    rows = [{"n": i} for i in range(4)]
    pages = Pages(rows)
    assert await _read(pages, 4) == rows
    assert pages.asked == [0, 2, 4]


async def test_a_page_with_more_rows_than_asked_for_fails_with_the_reason() -> None:
    pages = Pages([{"n": i} for i in range(6)], extra_at=2)
    with pytest.raises(
        ScoutError, match="Scout sent 3 rows at offset 2 of run r1 when asked for 2"
    ):
        await _read(pages, 6)


async def test_a_failed_page_stops_the_read_and_the_page_ahead_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pages = Pages([{"n": i} for i in range(9)], fail_at=2)
    with pytest.raises(ScoutError, match="HTTP 404"):
        await _read(pages, 9)
    await asyncio.sleep(0.05)
    assert max(pages.asked) <= 4
    assert "never retrieved" not in caplog.text


async def test_a_page_read_before_is_counted_but_not_decoded_again() -> None:
    rows = [{"n": i} for i in range(5)]
    settings = Settings.from_env({}, scout_page_size=2, scout_tries=1)
    client = ScoutClient(settings, transport=httpx.MockTransport(Pages(rows)))
    try:
        first = await client.pages("http://scout.test", _run(5))
        seen = {first[1].digest: first[1].count}
        again = await client.pages("http://scout.test", _run(5), seen)
    finally:
        await client.close()
    assert [p.items for p in first] == [rows[0:2], rows[2:4], rows[4:5]]
    assert [p.items for p in again] == [rows[0:2], None, rows[4:5]]
    assert again[1].decoded() == rows[2:4] and again[1].count == 2
