"""asyncpg's pool logs an outage in one line; anything else keeps its traceback."""

from __future__ import annotations

import logging
import sys

import pytest

import omnium_db  # noqa: F401  (installs the filter on asyncpg's pool logger)


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except type(exc):
        info = sys.exc_info()
    return logging.LogRecord(
        "asyncpg.pool", logging.WARNING, __file__, 1, "Failed to restore %s", ("the floor",), info
    )


@pytest.mark.parametrize(
    "exc", [ConnectionRefusedError(111, "Connect call failed"), TimeoutError("no answer")]
)
def test_an_outage_is_one_line_with_its_reason(exc: BaseException) -> None:
    record = _record(exc)
    logger = logging.getLogger("asyncpg.pool")
    assert all(f.filter(record) for f in logger.filters)
    assert record.exc_info is None
    assert record.getMessage().startswith("Failed to restore the floor (")
    assert type(exc).__name__ in record.getMessage()


def test_a_bug_keeps_its_traceback() -> None:
    record = _record(ValueError("not an outage"))
    for f in logging.getLogger("asyncpg.pool").filters:
        f.filter(record)
    assert record.exc_info is not None
