"""The one way a test waits for something that happens on its own time: `eventually`.

    await eventually(lambda: db.fetchval(query), what="the row")          # until truthy
    await eventually(text(screen, "#status"), "Saved", what="the status")  # until equal

`check` may be a plain function or a coroutine function. It is asked every `every` seconds until
its answer is truthy (or equal to `wanted`, when given); past `within` seconds the test fails
with the last answer, so a wait that never ends says what it saw. A wait is never a timing
target: `within` is how long a slow, shared machine may take, not how fast it should be.
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
) -> T:
    """`check()`'s first answer that is truthy (or equals `wanted`); fails after `within` s."""
    deadline = time.monotonic() + within
    while True:
        answer = check()
        value: T = await answer if inspect.isawaitable(answer) else answer  # type: ignore[assignment]
        if (value == wanted) if wanted is not _TRUTHY else bool(value):
            return value
        if time.monotonic() > deadline:
            looked_for = f"wanted {wanted!r}, " if wanted is not _TRUTHY else ""
            raise AssertionError(
                f"waited {within:g} s for {what or check}: {looked_for}last answer {value!r}"
            )
        await asyncio.sleep(every)
