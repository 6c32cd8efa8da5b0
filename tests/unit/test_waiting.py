"""`eventually`, the tests' one wait: what it returns, when it gives up, and what it says then."""

from __future__ import annotations

import itertools

import pytest

from tests.support.waiting import eventually, eventually_sync


async def test_the_first_truthy_answer_is_returned() -> None:
    answers = iter([0, "", 7, 8])
    assert await eventually(lambda: next(answers), every=0) == 7


async def test_a_coroutine_check_is_awaited_and_compared_with_wanted() -> None:
    counter = itertools.count()

    async def count() -> int:
        return next(counter)

    assert await eventually(count, 3, every=0) == 3


async def test_until_judges_the_answer_and_the_answer_is_returned() -> None:
    answers = iter([{"status": "applying"}, {"status": "applied"}])
    got = await eventually(lambda: next(answers), until=lambda a: a["status"] == "applied", every=0)
    assert got == {"status": "applied"}


async def test_ignored_exceptions_are_not_yet_and_others_go_up() -> None:
    calls = itertools.count()

    def connect() -> str:
        if next(calls) < 2:
            raise ConnectionRefusedError("still starting")
        return "connected"

    assert await eventually(connect, ignoring=(OSError,), every=0) == "connected"

    def exited() -> bool:
        raise RuntimeError("the server exited")

    with pytest.raises(RuntimeError, match="the server exited"):
        await eventually(exited, ignoring=(OSError,), every=0)


async def test_a_wait_that_never_ends_says_what_it_saw_last() -> None:
    with pytest.raises(AssertionError, match=r"waited 0\.1 s for the row: last answer None"):
        await eventually(lambda: None, within=0.1, what="the row", every=0.01)
    with pytest.raises(AssertionError, match=r"last answer ConnectionRefusedError\('no'\)"):
        await eventually(_refused, within=0.1, ignoring=(OSError,), every=0.01)


def _refused() -> None:
    raise ConnectionRefusedError("no")


def test_the_sync_wait_answers_as_the_other_does() -> None:
    answers = iter([None, None, "leader"])
    assert eventually_sync(lambda: next(answers), every=0) == "leader"
    with pytest.raises(AssertionError, match=r"waited 0\.1 s for a leader: last answer None"):
        eventually_sync(lambda: None, within=0.1, what="a leader", every=0.01)
