"""The demo's Scout integrations and media clients, set up the one way dev, tests and
benchmarks share."""

from __future__ import annotations

import base64
import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from omnium_imports import (
    IntegrationSpec,
    add_lookups,
    load_reference,
    mapping_file,
    register_integration,
)
from omnium_settings import Settings

# What an integration of each target reads Scout's rows with, and the name the console shows.
_MAPPINGS = {"unit": "scout_units", "medal_row": "scout_medals"}
_NAMES = {"unit": "Scout: schedule and results", "medal_row": "Scout: medal table"}


@dataclass(frozen=True, slots=True)
class Feed:
    """One Scout job imported as one integration: `unit` makes and changes units, `medal_row`
    fills the medal table."""

    code: str
    job: str
    target: str = "unit"
    name: str | None = None  # the target's usual name when None


SCHEDULE = Feed("scout-schedule", "schedule")
MEDALS = Feed("scout-medals", "medals", target="medal_row")


@dataclass(frozen=True, slots=True)
class DemoIntegrations:
    ids: dict[str, str]  # each feed's integration id, by code
    competitors: dict[str, str]  # Scout's competitor ids to ours, from the reference


async def demo_integrations(
    conn: asyncpg.Connection,
    reference: Mapping[str, Any],
    base_url: str,
    secret: str,
    feeds: Sequence[Feed] = (SCHEDULE, MEDALS),
    *,
    check_seconds: int | None = None,
) -> DemoIntegrations:
    """The reference's Games and competitors, then one integration per feed on the Scout at
    `base_url`, ringing with `secret`; the unit feeds get the competitor lookups.

    `check_seconds`: how long an integration may go unheard before the scheduler checks it
    (None: the integration's default)."""
    competitors = await load_reference(conn, reference)
    event = reference["event"]["code"]
    ids: dict[str, str] = {}
    for feed in feeds:
        spec = IntegrationSpec(
            code=feed.code,
            event_code=event,
            name=feed.name or _NAMES[feed.target],
            target=feed.target,
            base_url=base_url,
            job=feed.job,
            secret=secret,
            mapping=mapping_file(_MAPPINGS[feed.target]),
            creates_units=feed.target == "unit",
        )
        if check_seconds is not None:
            spec = dataclasses.replace(spec, check_seconds=check_seconds)
        ids[feed.code] = await register_integration(conn, spec)
        if feed.target == "unit":
            await add_lookups(conn, ids[feed.code], "competitor", competitors)
    return DemoIntegrations(ids, competitors)


def demo_clients(settings: Settings, data_dir: Path, event: str) -> list[dict[str, Any]]:
    """The seed's media clients: one gets 7 files by SFTP, one the top-5 medal table by webhook."""
    # Only the dev stack and the drills have clients: the import tests need not load SFTP.
    from omnium_delivery.sinks import ensure_keys  # noqa: PLC0415

    host_key, client_key = ensure_keys(data_dir / "sftp-keys")
    host = settings.server.bind_host
    return [
        {
            "code": "ndtv",
            "name": "NDTV (demo)",
            "event": event,
            "transport": "sftp",
            "sftp": {
                "host": host,
                "port": settings.dev.sftp_sink_port,
                "username": "ndtv",
                "client_key": str(client_key.resolve()),
                "host_key": host_key,
                "folder": ".",
            },
            "feeds": [
                {"kind": "schedule", "format": "odf"},
                {"kind": "schedule", "format": "json"},
                {"kind": "schedule", "format": "csv"},
                {"kind": "results", "format": "odf", "live": True},
                {"kind": "results", "format": "json", "live": True},
                {"kind": "medals", "format": "odf"},
                {"kind": "medals", "format": "csv"},
            ],
        },
        {
            "code": "dailyhunt",
            "name": "DailyHunt (demo)",
            "event": event,
            "transport": "webhook",
            "webhook": {
                "url": f"http://{host}:{settings.dev.webhook_sink_port}/hooks/dailyhunt",
                "secret": webhook_secret(data_dir),
            },
            "feeds": [{"kind": "medals", "format": "json", "top": 5}],
        },
    ]


def webhook_secret(data_dir: Path) -> str:
    """The secret dailyhunt's webhooks are signed with, kept beside the data for the sink."""
    path = data_dir / "webhook-secret"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text("whsec_" + base64.b64encode(secrets.token_bytes(24)).decode() + "\n")
        path.chmod(0o600)
    return path.read_text().strip()
