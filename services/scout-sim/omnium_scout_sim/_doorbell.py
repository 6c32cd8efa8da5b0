"""The doorbell: after a run, Scout posts it with a sample, signed with the integration's secret."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

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
    answer: object
    error: str | None
    signed_wrongly: bool
    tries: int = 1  # rings it took: one more for each that was not answered or answered 5xx

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "job": self.job,
            "endpoint": self.endpoint,
            "sent_at": utc_text(self.sent_at),
            "status": self.status,
            "answer": self.answer,
            "error": self.error,
            "signed_wrongly": self.signed_wrongly,
            "tries": self.tries,
        }

    @property
    def passing(self) -> bool:
        """Not answered, or answered with an error that passes (omnium starting or its database
        away: 503 with Retry-After): worth ringing again. A 4xx is omnium's final word."""
        return self.status is None or self.status == 429 or self.status >= 500


def sign(body: bytes, secret: str) -> str:
    """The header value: 'sha256=' and the hex HMAC-SHA256 of the exact body bytes."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def doorbell_body(run: Run, sample_rows: int) -> bytes:
    return json.dumps(
        {"run": run.to_json(), "sample": run.sample(sample_rows)}, separators=(",", ":")
    ).encode()


@dataclass(frozen=True, slots=True)
class RingAgain:
    """How a doorbell not answered (or answered 5xx) is rung again: `tries` rings in all, the
    waits between them growing from `first_seconds`, doubling, to `max_seconds` (a Retry-After
    is followed, up to `max_seconds`). Scout rings again so; omnium starting later than Scout
    (`make run`) then still hears the first run."""

    tries: int = 8
    first_seconds: float = 0.5
    max_seconds: float = 30.0


class DoorbellSender:
    """Sends doorbells, in the background or awaited, and remembers the last `keep` of them.

    A doorbell that fails is rung again (RingAgain), then logged and recorded, never raised:
    omnium being down must not stop the simulator from making runs, just as it does not stop
    Scout.
    """

    def __init__(
        self,
        *,
        timeout_seconds: float,
        keep: int,
        clock: Callable[[], datetime] | None = None,
        again: RingAgain | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.again = again or RingAgain()
        self.deliveries: deque[Delivery] = deque(maxlen=keep)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._session: aiohttp.ClientSession | None = None
        self._pending: set[asyncio.Task[Delivery]] = set()

    async def send(
        self, target: DoorbellTarget, run: Run, *, sample_rows: int, wrong_signature: bool = False
    ) -> Delivery:
        """Ring, and ring again while omnium does not answer or answers 5xx; the last answer
        is recorded, with how many rings it took."""
        again = self.again
        wait = again.first_seconds
        tries = 0
        while True:
            tries += 1
            delivery, retry_after = await self._ring(target, run, sample_rows, wrong_signature)
            if not delivery.passing or tries >= again.tries:
                break
            wait = min(retry_after if retry_after is not None else wait, again.max_seconds)
            log.info(
                "doorbell for run %s to %s: %s; ringing again in %.1f s (ring %d of %d)",
                run.id,
                target.endpoint,
                delivery.error or f"answered {delivery.status}",
                wait,
                tries + 1,
                again.tries,
            )
            await asyncio.sleep(wait)
            wait = min(wait * 2, again.max_seconds)
        delivery = dataclasses.replace(delivery, tries=tries)
        if delivery.error is not None:
            log.warning(
                "doorbell for run %s to %s was not answered after %d rings: %s",
                run.id,
                target.endpoint,
                tries,
                delivery.error,
            )
        elif delivery.status != 200:
            log.warning(
                "doorbell for run %s to %s answered %s: %s",
                run.id,
                target.endpoint,
                delivery.status,
                delivery.answer,
            )
        self.deliveries.append(delivery)
        return delivery

    async def _ring(
        self, target: DoorbellTarget, run: Run, sample_rows: int, wrong_signature: bool
    ) -> tuple[Delivery, float | None]:
        """One ring: what omnium answered, and its Retry-After in seconds, if it sent one."""
        body = doorbell_body(run, sample_rows)
        secret = _WRONG_SECRET if wrong_signature else target.secret
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, secret)}
        sent_at = self._clock()
        status: int | None = None
        answer: object = None
        error: str | None = None
        retry_after: float | None = None
        try:
            if self._session is None:
                self._session = aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self.timeout_seconds)
                )
            async with self._session.post(target.endpoint, data=body, headers=headers) as response:
                status = response.status
                text = await response.text()
                retry_after = _seconds(response.headers.get("Retry-After"))
            try:
                answer = json.loads(text)
            except ValueError:
                answer = text[:_ANSWER_CHARS]
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        except Exception as exc:  # a bug here must not take the simulator down with it
            error = f"{type(exc).__name__}: {exc}"
            log.exception("doorbell for run %s to %s failed", run.id, target.endpoint)
        delivery = Delivery(
            run.id, run.job, target.endpoint, sent_at, status, answer, error, wrong_signature
        )
        return delivery, retry_after

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
        """Wait for the doorbells in flight (each is bounded by its rings, RingAgain)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=seconds)

    async def cancel(self, grace: float = 0.0) -> None:
        """Give the doorbells in flight `grace` seconds, then stop ringing them."""
        if grace > 0:
            await self.drain(grace)
        for task in list(self._pending):
            task.cancel()
        if self._pending:
            await asyncio.wait(set(self._pending))

    async def close(self, grace: float = 0.0) -> None:
        await self.cancel(grace)
        if self._session is not None:
            await self._session.close()
            self._session = None


def _seconds(header: str | None) -> float | None:
    """A Retry-After given in seconds; an HTTP date, or nothing usable, is None."""
    try:
        return max(float(header), 0.0) if header is not None else None
    except ValueError:
        return None
