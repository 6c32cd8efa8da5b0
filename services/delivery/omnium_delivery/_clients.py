"""Clients and feeds are settings: read from a JSON file (or a mapping) into the database."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from omnium_delivery._sftp import SftpTransport
from omnium_delivery._sql import QUERIES
from omnium_delivery._transport import ClientSettingsError
from omnium_delivery._webhook import WebhookTransport, rotated
from omnium_outbound import url_problem
from omnium_settings import Settings

KINDS = ("schedule", "results", "medals")
FORMATS = ("json", "csv", "odf")
TRANSPORTS = ("sftp", "webhook")
_CODE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,39}$")


def read_clients_file(path: str | Path) -> list[dict[str, Any]]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClientSettingsError(f"the clients file {path} cannot be read: {exc}") from None
    except ValueError as exc:
        raise ClientSettingsError(f"the clients file {path} is not JSON: {exc}") from None
    clients = raw.get("clients") if isinstance(raw, Mapping) else None
    if not isinstance(clients, list):
        raise ClientSettingsError(f'the clients file {path} needs {{"clients": [ ... ]}}')
    return clients


def _feed(client: str, index: int, raw: object, transport: str) -> dict[str, Any]:
    where = f"client {client}, feed {index + 1}"
    if not isinstance(raw, Mapping):
        raise ClientSettingsError(f"{where}: a feed is an object with kind and format")
    kind, fmt = raw.get("kind"), raw.get("format", "json")
    if kind not in KINDS:
        raise ClientSettingsError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if fmt not in FORMATS:
        raise ClientSettingsError(f"{where}: format {fmt!r} is not one of {', '.join(FORMATS)}")
    top = raw.get("top")
    if top is not None and (kind != "medals" or not isinstance(top, int) or top < 1):
        raise ClientSettingsError(f"{where}: top (a whole number from 1) is for medals feeds only")
    discipline = raw.get("discipline")
    if discipline is not None and not (isinstance(discipline, str) and len(discipline) == 3):
        raise ClientSettingsError(f"{where}: discipline is a three-letter code such as FBL")
    return {
        "kind": kind,
        "format": fmt,
        "discipline": discipline.upper() if discipline else None,
        "top": top,
        # A webhook is one small POST per version: by default it merges at the live window.
        "live": bool(raw.get("live", transport == "webhook")),
    }


def check_client(raw: object, settings: Settings | None = None) -> dict[str, Any]:
    """A client from settings, checked: every problem is said in words a person can act on.

    With `settings`, a webhook's address is checked against OMNIUM_OUTBOUND_ALLOWED_NETWORKS
    too (its name is resolved: this blocks)."""
    if not isinstance(raw, Mapping):
        raise ClientSettingsError("a client is an object with code, name, event, transport, feeds")
    code = raw.get("code")
    if not isinstance(code, str) or not _CODE.match(code):
        raise ClientSettingsError(
            f"client code {code!r}: use 2 to 40 of a-z, 0-9, _ or -, "
            "starting with a letter or digit"
        )
    transport = raw.get("transport")
    if transport not in TRANSPORTS:
        raise ClientSettingsError(
            f"client {code}: transport {transport!r} is not one of {', '.join(TRANSPORTS)}"
        )
    if not raw.get("event"):
        raise ClientSettingsError(f"client {code}: say which Games (event, e.g. AG2026)")
    feeds = raw.get("feeds")
    if not isinstance(feeds, list) or not feeds:
        raise ClientSettingsError(f"client {code}: list at least one feed")
    checked = [_feed(code, i, f, transport) for i, f in enumerate(feeds)]
    checker = raw.get("checker", False)
    if not isinstance(checker, bool | list):
        raise ClientSettingsError(
            f"client {code}: checker is true, false, or a list of disciplines (['ATH'])"
        )
    client_settings: dict[str, Any] = {"checker": checker}
    if transport == "sftp":
        client_settings["sftp"] = raw.get("sftp")
        SftpTransport(settings or Settings(), code, client_settings)
    else:
        client_settings["webhook"] = raw.get("webhook")
        WebhookTransport(settings or Settings(), None, code, client_settings)
        if settings is not None:
            # Said when the client is saved, against this process's allowed ranges; each send
            # checks the address it connects to again (omnium_outbound).
            problem = url_problem(
                client_settings["webhook"]["url"], settings, what=f"client {code}: webhook.url"
            )
            if problem is not None:
                raise ClientSettingsError(problem)
    return {
        "code": code,
        "name": str(raw.get("name") or code),
        "event": str(raw["event"]),
        "transport": transport,
        "enabled": bool(raw.get("enabled", True)),
        "settings": client_settings,
        "feeds": checked,
    }


def stored_hook(value: object) -> Mapping[str, Any] | None:
    """A stored webhook's settings, read with or without the pool's JSON codec."""
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, Mapping) else None


async def load_clients(
    conn: asyncpg.Connection, clients: Sequence[Any], settings: Settings | None = None
) -> list[str]:
    """Add or update each client and its feeds (feeds no longer listed are dropped), in one
    transaction; new feeds are built and sent at once. Returns the client codes."""
    # A webhook's host is resolved to check its address: off the loop.
    checked = await asyncio.to_thread(lambda: [check_client(raw, settings) for raw in clients])
    codes = []
    overlap = (settings or Settings()).delivery.webhook_secret_overlap_seconds
    async with conn.transaction():
        disciplines: dict[str, dict[str, str]] = {}
        for client in checked:
            event = client["event"]
            if event not in disciplines:
                disciplines[event] = dict(
                    (r["code"], r["id"]) for r in await conn.fetch(QUERIES["discipline_ids"], event)
                )
            if client["transport"] == "webhook":
                # A new secret in the file: the one it replaces still signs for a while.
                old = await conn.fetchval(QUERIES["webhook_of"], client["code"])
                client["settings"]["webhook"] = rotated(
                    stored_hook(old), client["settings"]["webhook"], overlap, datetime.now(UTC)
                )
            row = await conn.fetchrow(
                *QUERIES.bind(
                    "upsert_client",
                    code=client["code"],
                    name=client["name"],
                    event_code=event,
                    transport=client["transport"],
                    settings=client["settings"],
                    enabled=client["enabled"],
                )
            )
            if row is None:
                raise ClientSettingsError(f"client {client['code']}: there is no Games {event}")
            feed_ids = []
            for feed in client["feeds"]:
                discipline_id = None
                if feed["discipline"]:
                    discipline_id = disciplines[event].get(feed["discipline"])
                    if discipline_id is None:
                        raise ClientSettingsError(
                            f"client {client['code']}: there is no discipline "
                            f"{feed['discipline']} in {event}"
                        )
                feed_ids.append(
                    await conn.fetchval(
                        *QUERIES.bind(
                            "upsert_feed",
                            client_id=row["id"],
                            kind=feed["kind"],
                            format=feed["format"],
                            discipline_id=discipline_id,
                            top_n=feed["top"],
                            live=feed["live"],
                        )
                    )
                )
            await conn.execute(QUERIES["drop_other_feeds"], row["id"], feed_ids)
            codes.append(client["code"])
        await conn.execute(QUERIES["wake_senders"])
    return codes
