"""Which database failures are an outage: the road's try_again words and every loop that must
outlive a restart or a failover rest on this sorting."""

from __future__ import annotations

import asyncpg
import pytest
from asyncpg.exceptions import TargetServerAttributeNotMatched

from omnium_db import connection_lost, is_outage, not_connected

NO_PRIMARY = TargetServerAttributeNotMatched(
    "None of the hosts match the target attribute requirement read-write"
)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.InterfaceError("connection is closed"),
        asyncpg.InterfaceError(
            "cannot call Connection.fetchrow(): connection has been released back to the pool"
        ),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        ConnectionResetError("reset by peer"),
        asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        ),
    ],
    ids=["closed", "detached-by-the-pool", "admin-shutdown", "reset", "protocol-mid-error"],
)
def test_a_connection_that_broke_under_a_statement_may_have_saved(exc: BaseException) -> None:
    assert connection_lost(exc)
    assert not not_connected(exc)
    assert is_outage(exc)


@pytest.mark.parametrize(
    "exc",
    [
        NO_PRIMARY,
        asyncpg.CannotConnectNowError("the database system is starting up"),
        ConnectionRefusedError("refused"),
        asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"),
    ],
    ids=["no-primary", "starting", "refused", "standby"],
)
def test_no_connection_to_a_primary_wrote_nothing(exc: BaseException) -> None:
    assert not connection_lost(exc)
    assert not_connected(exc)
    assert is_outage(exc)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.UndefinedColumnError("column nope does not exist"),
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        asyncpg.InternalClientError("something else went wrong inside the client"),
        ValueError("a bug of ours"),
    ],
    ids=["sql-bug", "two-tasks-one-connection", "other-client-error", "ours"],
)
def test_a_bug_is_not_an_outage(exc: BaseException) -> None:
    assert not is_outage(exc)
