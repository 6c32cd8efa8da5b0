"""The Games the public API benchmark reads: 16 disciplines, 1,240 units over 16 days (a tenth
live), 400 teams and a medal table, written straight to a fresh database."""

from __future__ import annotations

import asyncpg

from bench._common import database_url_for
from omnium_db import apply_migrations

DB_NAME = "omnium_bench_api"
EVENT = "AG2026"
DISCIPLINES = (
    "ARC", "ATH", "BDM", "BKB", "BOX", "CSP", "CYC", "DIV",
    "FBL", "GOL", "HOC", "JUD", "SWM", "TEN", "VVO", "WLF",
)  # fmt: skip
NOCS = (
    "KOR", "JPN", "CHN", "IND", "THA", "VIE", "PHI", "INA", "MAS", "SGP", "KAZ", "UZB", "IRI",
    "QAT", "KSA", "UAE", "HKG", "TPE", "MGL", "PAK", "SRI", "BAN", "NEP", "KUW", "BRN", "JOR",
    "LIB", "SYR", "IRQ", "OMA", "YEM", "AFG", "TJK", "KGZ", "TKM", "MYA", "CAM", "LAO", "BRU",
    "TLS",
)  # fmt: skip
DAYS = 16


def say(message: str) -> None:
    print(message, flush=True)


async def seed(server_url: str, units: int) -> str:
    """A Games: 16 disciplines, 1,240 units over 16 days (a tenth live), a medal table."""
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{DB_NAME}"')
    finally:
        await admin.close()
    url = database_url_for(server_url, DB_NAME)
    conn = await asyncpg.connect(url)
    try:
        await apply_migrations(conn)
        event_id = await conn.fetchval(
            "INSERT INTO event (code, name, time_zone, starts_on, ends_on) "
            "VALUES ($1, 'Aichi-Nagoya 2026', 'Asia/Tokyo', '2026-09-19', '2026-10-04') "
            "RETURNING id",
            EVENT,
        )
        await conn.executemany(
            "INSERT INTO discipline (event_id, code, name) VALUES ($1, $2, $2)",
            [(event_id, d) for d in DISCIPLINES],
        )
        await conn.execute(
            """
            INSERT INTO competitor (event_id, kind, code, name, noc)
            SELECT $1, 'team', 'T' || lpad(n::text, 4, '0'), 'Team ' || n, ($2::text[])[1 + n % 40]
              FROM generate_series(0, 399) n
            """,
            event_id,
            list(NOCS),
        )
        await conn.execute(
            """
            INSERT INTO unit (event_id, discipline_id, code, name, phase, start_at, venue, status)
            SELECT $1, d.id,
                   d.code || 'M' || rpad('EV' || (n % 18), 18, '-') || 'FNL-'
                     || lpad(n::text, 8, '0'),
                   'Unit ' || n, 'Round ' || (1 + n % 4),
                   timestamptz '2026-09-19 00:00+00' + (n % $3) * interval '1 day'
                     + (n % 12) * interval '1 hour',
                   'Venue ' || (n % 30),
                   CASE WHEN n % 10 = 0 THEN 'RUNNING'
                        WHEN n % 10 < 5 THEN 'OFFICIAL' ELSE 'SCHEDULED' END
              FROM generate_series(0, $2 - 1) n
              JOIN discipline d ON d.event_id = $1 AND d.code = ($4::text[])[1 + n % 16]
            """,
            event_id,
            units,
            DAYS,
            list(DISCIPLINES),
        )
        await conn.execute(
            """
            INSERT INTO unit_competitor (unit_id, sort_order, competitor_id, score, rank)
            SELECT u.id, s, c.id, (random() * 5)::int::text, s
              FROM (SELECT id, row_number() OVER (ORDER BY code) AS n FROM unit) u
              CROSS JOIN generate_series(1, 2) s
              JOIN competitor c ON c.code = 'T' || lpad(((u.n * 2 + s) % 400)::text, 4, '0')
            """
        )
        await conn.execute(
            """
            INSERT INTO medal_row (event_id, noc, gold, silver, bronze, total, rank)
            SELECT $1, noc, 40 - i, 30 - i / 2, 20 - i / 3, 90 - i - i / 2 - i / 3, i + 1
              FROM unnest($2::text[]) WITH ORDINALITY AS t(noc, i)
            """,
            event_id,
            list(NOCS),
        )
        codes = [r["code"] for r in await conn.fetch("SELECT code FROM unit ORDER BY code")]
    finally:
        await conn.close()
    say(f"seeded {len(codes)} units, {len(NOCS)} medal rows")
    return url
