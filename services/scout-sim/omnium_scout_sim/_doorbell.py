"""The doorbell: after a run, Scout posts it with a sample, signed with the integration's secret."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from omnium_scout_sim._runs import Run, utc_text

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Scout-Signature"
_ANSWER_CHARS = 500  # enough of a non-JSON answer to see what went wrong
_WRONG_SECRET = "not-the-integration-secret"


@dataclass(frozen=True, slots=True)
class DoorbellTarget:
    """Where one job's doorbell goes: omnium's base URL, the integration's code and secret."""

    url: str
    integration_code: str
    secret: str

    @property
    def endpoint(self) -> str:
        return f"{self.url.rstrip('/')}/doorbell/{self.integration_code}"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One doorbell sent: what omnium answered, or why nothing came back."""

    run_id: str
    job: str
    endpoint: str
    sent_at: datetime
    status: int | None
    answer: Any
    error: str | None
    signed_wrongly: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "job": self.job,
            "endpoint": self.endpoint,
            "sent_at": utc_text(self.sent_at),
            "status": self.status,
            "answer": self.answer,
            "error": self.error,
            "signed_wrongly": self.signed_wrongly,
        }


def sign(body: bytes, secret: str) -> str:
    """The header value: 'sha256=' and the hex HMAC-SHA256 of the exact body bytes."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def doorbell_body(run: Run, sample_rows: int) -> bytes:
    return json.dumps(
        {"run": run.to_json(), "sample": run.sample(sample_rows)}, separators=(",", ":")
    ).encode()


class DoorbellSender:
    """Sends doorbells, in the background or awaited, and remembers the last `keep` of them.

    A doorbell that fails is logged and recorded, never raised: omnium being down must not
    stop the simulator from making runs, just as it does not stop Scout.
    """

    def __init__(
        self, *, timeout_seconds: float, keep: int, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.deliveries: deque[Delivery] = deque(maxlen=keep)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._session: aiohttp.ClientSession | None = None
        self._pending: set[asyncio.Task[Delivery]] = set()

    async def send(
        self, target: DoorbellTarget, run: Run, *, sample_rows: int, wrong_signature: bool = False
    ) -> Delivery:
        body = doorbell_body(run, sample_rows)
        secret = _WRONG_SECRET if wrong_signature else target.secret
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, secret)}
        sent_at = self._clock()
        status: int | None = None
        answer: Any = None
        error: str | None = None
        try:
            if self._session is None:
                self._session = aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self.timeout_seconds)
                )
            async with self._session.post(target.endpoint, data=body, headers=headers) as response:
                status = response.status
                text = await response.text()
            try:
                answer = json.loads(text)
            except ValueError:
                answer = text[:_ANSWER_CHARS]
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.warning(
                "doorbell for run %s to %s was not answered: %s", run.id, target.endpoint, error
            )
        except Exception as exc:  # a bug here must not take the simulator down with it
            error = f"{type(exc).__name__}: {exc}"
            log.exception("doorbell for run %s to %s failed", run.id, target.endpoint)
        else:
            if status != 200:
                log.warning(
                    "doorbell for run %s to %s answered %s: %s",
                    run.id,
                    target.endpoint,
                    status,
                    answer,
                )
        delivery = Delivery(
            run.id, run.job, target.endpoint, sent_at, status, answer, error, wrong_signature
        )
        self.deliveries.append(delivery)
        return delivery

    def send_later(
        self, target: DoorbellTarget, run: Run, *, sample_rows: int, wrong_signature: bool = False
    ) -> asyncio.Task[Delivery]:
        task = asyncio.create_task(
            self.send(target, run, sample_rows=sample_rows, wrong_signature=wrong_signature),
            name=f"doorbell-{run.id}",
        )
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def drain(self, seconds: float | None = None) -> None:
        """Wait for the doorbells in flight (each is bounded by the client timeout anyway)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=seconds)

    async def close(self, grace: float = 0.0) -> None:
        if grace > 0:
            await self.drain(grace)
        for task in list(self._pending):
            task.cancel()
        if self._pending:
            await asyncio.wait(set(self._pending))
        if self._session is not None:
            await self._session.close()
            self._session = None
