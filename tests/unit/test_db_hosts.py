"""A multi-host DSN is tried host by host, each with its own connect timeout."""

from __future__ import annotations

from omnium_db import host_dsns


def test_a_dsn_of_two_hosts_is_split_in_order() -> None:
    dsn = "postgresql://postgres:pw@db1:5432,db2:5433/omnium?target_session_attrs=read-write"
    assert host_dsns(dsn) == [
        "postgresql://postgres:pw@db1:5432/omnium?target_session_attrs=read-write",
        "postgresql://postgres:pw@db2:5433/omnium?target_session_attrs=read-write",
    ]


def test_a_dsn_of_one_host_is_kept_as_it_is() -> None:
    for dsn in ("postgresql://postgres@127.0.0.1:5432/omnium", "postgresql:///omnium?host=/tmp"):
        assert host_dsns(dsn) == [dsn]
