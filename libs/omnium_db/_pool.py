"""asyncpg pools, one per road, each with that road's time limits set on its connections."""

from __future__ import annotations

import json
import logging
import socket
from enum import Enum
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from asyncpg.exceptions import TargetServerAttributeNotMatched

from omnium_db._outage import is_outage
from omnium_metrics import watch_pool
from omnium_settings import Settings


class PoolRoad(Enum):
    """Which road a pool serves; each has its own size and time limits."""

    PEOPLE = "people"
    IMPORTS = "imports"
    READER = "reader"


def _ms(seconds: float) -> str:
    return str(int(seconds * 1000))


def server_settings(settings: Settings, road: PoolRoad, application_name: str) -> dict[str, str]:
    """The session settings a road's connections start with, so no transaction pays a SET."""
    common = {"application_name": application_name, "synchronous_commit": "on"}
    if road is PoolRoad.IMPORTS:
        return {
            **common,
            "lock_timeout": _ms(settings.database.import_lock_timeout_seconds),
            "statement_timeout": _ms(settings.database.import_statement_timeout_seconds),
            "idle_in_transaction_session_timeout": _ms(settings.database.import_idle_seconds),
        }
    # People and scorers: the whole command must fit in its transaction time. PostgreSQL 15
    # has no transaction_timeout, so each statement and each idle gap is bounded by it and
    # the road also puts an asyncio deadline on the transaction.
    limit = _ms(settings.database.people_transaction_seconds)
    return {
        **common,
        "lock_timeout": limit,
        "statement_timeout": limit,
        "idle_in_transaction_session_timeout": limit,
    }


def statement_limit(settings: Settings, road: PoolRoad) -> float:
    """The longest one statement of the road may run on the server (its statement_timeout)."""
    if road is PoolRoad.IMPORTS:
        return settings.database.import_statement_timeout_seconds
    return settings.database.people_transaction_seconds


def command_timeout(settings: Settings, road: PoolRoad) -> float:
    """asyncpg's command_timeout for the road: a statement unanswered past the server's own
    limit, by the grace, means the server is not answering at all. asyncpg 0.32 bounds the
    cancel it then sends by the same time and drops the connection when that goes unanswered,
    so a frozen server holds a pooled connection (and its release) no longer than this."""
    return statement_limit(settings, road) + settings.database.answer_grace_seconds


def keep_alive(conn: asyncpg.Connection, dead_seconds: float) -> None:
    """TCP keepalives and TCP_USER_TIMEOUT on the connection's socket: a server's machine that
    stops acknowledging (lost, cut off) is given up by the kernel after about `dead_seconds`,
    where TCP's own retries would take some 15 minutes. (A frozen process on a live kernel is
    acknowledged all along: the command timeout and HAProxy's checks cover that one.)"""
    transport = conn._transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family == socket.AF_UNIX:
        return
    idle = max(1, int(dead_seconds / 2))
    probes = 3
    interval = max(1, int((dead_seconds - idle) / probes))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(dead_seconds * 1000))


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _reset(conn: asyncpg.Connection) -> None:
    # asyncpg's default reset costs a round trip per release (UNLISTEN *, RESET ALL, ...).
    # Our units of work leave no session state behind; only an unfinished transaction, from a
    # cancelled caller, must not reach the next user of the connection.
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


def host_dsns(dsn: str) -> list[str]:
    """The DSN once per host it names (`postgresql://u@h1:p1,h2:p2/db?...`), in order; a DSN
    of one host (or one naming its hosts another way) comes back as it is."""
    parts = urlsplit(dsn)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return [dsn]
    return [
        urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}"))
        for host in hosts.split(",")
        if host
    ]


async def connect_each_host(
    dsn: str, *, host_timeout: float, tcp_dead_seconds: float | None = None, **kwargs: object
) -> asyncpg.Connection:
    """A connection to the first host of the DSN that answers in `host_timeout` and has the
    session attributes asked for (`target_session_attrs=read-write`: the primary).

    asyncpg's own timeout covers all the hosts together, so a host that is down without
    refusing (a machine gone, its packets dropped) would use it all and the next host, the new
    primary, would never be tried; here each host has its own.
    """
    last: BaseException | None = None
    for one in host_dsns(dsn):
        try:
            conn = await asyncpg.connect(one, timeout=host_timeout, **kwargs)
        except (OSError, asyncpg.PostgresError, TargetServerAttributeNotMatched) as exc:
            # TimeoutError is an OSError: the next host is tried.
            last = exc
            continue
        if tcp_dead_seconds is not None:
            keep_alive(conn, tcp_dead_seconds)
        return conn
    assert last is not None
    raise last


async def connect_primary(settings: Settings, **kwargs: object) -> asyncpg.Connection:
    """A connection of its own, outside any pool (a LISTEN, the gateway relay's reader), made
    the way the pools make theirs: host by host, each with the pools' per-host timeout."""
    return await connect_each_host(
        settings.require_database_url(),
        host_timeout=settings.database.connect_timeout_seconds,
        tcp_dead_seconds=settings.database.tcp_dead_seconds,
        **kwargs,
    )


class _OutageInOneLine(logging.Filter):
    """asyncpg's pool logs each failed try to keep its minimum of connections with a traceback;
    during a restart or failover that is expected, so one line with the reason says enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_outage(exc):
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {exc})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


_POOL_LOG = logging.getLogger("asyncpg.pool")
if not any(isinstance(f, _OutageInOneLine) for f in _POOL_LOG.filters):
    _POOL_LOG.addFilter(_OutageInOneLine())


async def create_pool(
    settings: Settings,
    road: PoolRoad,
    *,
    application_name: str,
    size: int | None = None,
    min_size: int = 1,
    **kwargs: object,
) -> asyncpg.Pool:
    """Create the pool for one road. Call once at start-up and close it at shutdown."""
    default_size = {
        PoolRoad.PEOPLE: settings.database.people_pool_size,
        PoolRoad.IMPORTS: settings.database.import_pool_size,
        PoolRoad.READER: settings.database.reader_pool_size,
    }[road]
    max_size = size or default_size
    dsn = settings.require_database_url()
    timeout = settings.database.connect_timeout_seconds
    dead = settings.database.tcp_dead_seconds

    async def connect(dsn: str, **kw: object) -> asyncpg.Connection:
        kw.pop("loop", None)
        return await connect_each_host(dsn, host_timeout=timeout, tcp_dead_seconds=dead, **kw)

    # A broken connection is dropped by the pool and the next acquire connects again, to
    # whichever host is the primary then: a failover needs no restart of the service. A caller
    # may pass its own command_timeout (a longer one for a known slow read).
    kwargs.setdefault("command_timeout", command_timeout(settings, road))
    pool = await asyncpg.create_pool(
        dsn,
        connect=connect,
        min_size=min(min_size, max_size),
        max_size=max_size,
        server_settings=server_settings(settings, road, f"{application_name}:{road.value}"),
        init=init_connection,
        reset=_reset,
        **kwargs,
    )
    assert pool is not None
    watch_pool(pool, road.value)
    return pool
