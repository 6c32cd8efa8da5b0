"""What a transport is given and what it answers; shared by SFTP and webhooks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


class ClientSettingsError(ValueError):
    """A client's settings cannot work; the message says which one and what to put there."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One version of one feed, ready to go."""

    client_code: str
    feed_id: int
    kind: str
    format: str
    file_name: str
    version: int
    body: bytes
    sha256: str
    resend: bool = False


@dataclass(frozen=True, slots=True)
class SendResult:
    outcome: str  # delivered, failed (every try used) or refused (not worth another try)
    attempts: int
    error: str | None = None
    delivered_at: datetime | None = None
    alert: str | None = None  # the alert kind to raise, if any


class Transport(Protocol):
    async def send(self, item: Outgoing) -> SendResult: ...

    async def close(self) -> None: ...


def backoff(base: float, attempt: int) -> float:
    """Growing waits between tries: base, 2*base, 4*base..."""
    return float(base * 2 ** (attempt - 1))


@dataclass(frozen=True, slots=True)
class ClientRow:
    id: str
    code: str
    name: str
    transport: str
    settings: Mapping[str, object]
    event_id: str
    event_code: str


@dataclass(frozen=True, slots=True)
class Sent:
    """What a send hook sees: the client, the outgoing file and how it went."""

    client: ClientRow
    item: Outgoing
    result: SendResult
