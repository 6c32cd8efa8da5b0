"""The failover drill's clock for the LISTEN connections coming back after a restart."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from bench.drill_failover import ListenersBack, Listening

OLD = datetime(2026, 9, 20, 1, 0, tzinfo=UTC)
NEW = OLD + timedelta(seconds=40)
EVERY = Counter(
    {
        "delivery:listen": 1,
        "imports:listen": 1,
        "scoring watchers:listen": 1,
        "gateway relay:listen": 1,
    }
)


def test_the_clock_runs_from_the_new_postmaster_s_first_answer_to_every_listener_back() -> None:
    clock = ListenersBack(Listening(OLD, EVERY))
    # The killed postmaster, not gone yet, still shows every connection: that is no answer.
    assert not clock.look(1.0, Listening(OLD, EVERY))
    assert clock.answered is None
    assert not clock.look(4.0, Listening(NEW, Counter()))
    partly = Listening(NEW, EVERY - Counter({"gateway relay:listen": 1}))
    assert not clock.look(4.3, partly)
    assert clock.missing(partly) == ["gateway relay:listen"]
    assert clock.seconds is None
    assert clock.look(4.5, Listening(NEW, EVERY + Counter({"other:listen": 1})))
    assert clock.seconds == pytest.approx(0.5)


def test_each_copy_of_a_service_counts() -> None:
    clock = ListenersBack(Listening(OLD, Counter({"delivery:listen": 2})))
    one = Listening(NEW, Counter({"delivery:listen": 1}))
    assert not clock.look(2.0, one)
    assert clock.missing(one) == ["delivery:listen"]
    assert clock.look(2.25, Listening(NEW, Counter({"delivery:listen": 2})))
    assert clock.seconds == pytest.approx(0.25)


def test_a_new_leader_counts_as_the_answer_too() -> None:
    """If Patroni promoted the other node instead, its postmaster is older, not newer."""
    clock = ListenersBack(Listening(OLD, EVERY))
    assert clock.look(3.0, Listening(OLD - timedelta(hours=1), EVERY))
    assert clock.seconds == 0.0
