"""The one way a test waits for something that happens on its own time: `eventually`.

    await eventually(lambda: db.fetchval(query), what="the row")          # until truthy
    await eventually(text(screen, "#status"), "Saved", what="the status")  # until equal
    answer = await eventually(lambda: http.get(url), until=lambda r: r.status_code == 200)
    conn = await eventually(lambda: asyncpg.connect(url), ignoring=(OSError,))

`check` may be a plain function or a coroutine function (`eventually_sync`, for a test that
runs no event loop, takes a plain one). It is asked every `every` seconds until
its answer is truthy (or equal to `wanted`, or passes `until`, when given); past `within` seconds
the test fails with the last answer, so a wait that never ends says what it saw. An exception
of a type in `ignoring` counts as "not yet" (a server still starting refuses connections); any
other goes straight up, so a check can also fail the wait at once (a process that exited). A
wait is never a timing target: `within` is how long a slow, shared machine may take, not how
fast it should be.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
_TRUTHY: Any = object()


async def eventually(
    check: Callable[[], Awaitable[T] | T],
    wanted: Any = _TRUTHY,
    *,
    within: float = 30.0,
    what: str = "",
    every: float = 0.05,
    until: Callable[[T], object] | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """`check()`'s first answer that is truthy (or equals `wanted`, or passes `until`); fails
    after `within` s."""
    deadline = time.monotonic() + within
    while True:
        try:
            answer = check()
            value: T = await answer if inspect.isawaitable(answer) else answer  # type: ignore[assignment]
        except ignoring as exc:
            last: object = exc
        else:
            if _done(value, wanted, until):
                return value
            last = value
        _give_up_after(deadline, within, what or str(check), wanted, last)
        await asyncio.sleep(every)


def eventually_sync(
    check: Callable[[], T],
    wanted: Any = _TRUTHY,
    *,
    within: float = 30.0,
    what: str = "",
    every: float = 0.05,
    until: Callable[[T], object] | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """`eventually` for a test that runs no event loop: the same answers, sleeping between."""
    deadline = time.monotonic() + within
    while True:
        try:
            value = check()
        except ignoring as exc:
            last: object = exc
        else:
            if _done(value, wanted, until):
                return value
            last = value
        _give_up_after(deadline, within, what or str(check), wanted, last)
        time.sleep(every)


def _done(value: T, wanted: Any, until: Callable[[T], object] | None) -> bool:
    if until is not None:
        return bool(until(value))
    return (value == wanted) if wanted is not _TRUTHY else bool(value)


def _give_up_after(deadline: float, within: float, what: str, wanted: Any, last: object) -> None:
    if time.monotonic() > deadline:
        looked_for = f"wanted {wanted!r}, " if wanted is not _TRUTHY else ""
        raise AssertionError(f"waited {within:g} s for {what}: {looked_for}last answer {last!r}")
