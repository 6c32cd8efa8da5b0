"""Wake-ups for the WatchMatch streams: one LISTEN for the outbox's NOTIFY per process."""

from __future__ import annotations

import asyncio
import contextlib

from omnium_db import NotifyListener
from omnium_scoring._assigned import Assigned
from omnium_settings import Settings


class Watchers:
    """One LISTEN for the outbox's NOTIFY, shared by every WatchMatch stream of the process."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._listener: NotifyListener | None = None

    async def start(self, settings: Settings, assigned: Assigned | None = None) -> None:
        # Back from an outage every stream reads its match again: a change saved while the
        # connection was down sent a NOTIFY nobody heard. So do the assignments.
        channels = {"omnium_domain_event": self._notified}
        if assigned is not None:
            channels["omnium_scorer_assignment"] = lambda _payload: assigned.forget()

        def reconnected() -> None:
            if assigned is not None:
                assigned.forget()
            self._wake_all()

        self._listener = NotifyListener(
            settings, channels, name="scoring watchers", on_reconnect=reconnected
        )
        await self._listener.start()
        if assigned is not None:
            assigned.listening = True

    def _notified(self, _payload: str) -> None:
        self._wake_all()

    def _wake_all(self) -> None:
        asyncio.get_running_loop().create_task(self._wake())

    async def _wake(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait(self, seconds: float) -> None:
        """Until the next change anywhere, or `seconds` at most (a missed NOTIFY costs little)."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), seconds)

    async def stop(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
