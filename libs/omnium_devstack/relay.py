"""A cuttable TCP relay: one Patroni's link to etcd, which a drill can partition and heal.

Each listening port forwards to one target port on loopback. `cut()` makes the link behave as
a network partition, not a crash: bytes on open connections are dropped in both directions
and never answered, and new connections are accepted (on loopback the kernel completes the
handshake whoever listens) and then left silent, so the client waits for its own timeouts as
it would for a peer that vanished. Nothing is closed or refused while cut. `heal()` forwards
again; connections that lived through the cut are reset, since the bytes they lost make them
useless, and the client reconnects as after a timed-out connection.

The relay runs its own event loop in a daemon thread, so the caller may be synchronous (the HA
profile) or an asyncio program busy with its own load (the drill).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

from omnium_devstack.server import HOST, StackError

log = logging.getLogger("omnium_devstack")

CHUNK = 65536


class Relay:
    """Loopback ports forwarding to `targets` (ports on loopback), in order: `ports[i]` goes to
    `targets[i]`. `start()`, `cut()`, `heal()`, `stop()`."""

    def __init__(self, name: str, targets: Sequence[int]) -> None:
        self.name = name
        self.targets = list(targets)
        self.ports: list[int] = []
        self._cut = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        # Every open connection's transports; those open while cut are reset by heal().
        self._open: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tainted: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()

    @property
    def is_cut(self) -> bool:
        return self._cut

    # -- the caller's side

    def start(self) -> None:
        """Listen on free loopback ports (in `ports` once this returns)."""
        if self._thread is not None:
            return
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name=f"relay-{self.name}", daemon=True
        )
        self._thread.start()
        self.ports = self._call(self._listen())

    def cut(self) -> None:
        """Partition the link; in effect when this returns."""
        self._call(self._set_cut(True))

    def heal(self) -> None:
        """Forward again; connections that lived through the cut are reset."""
        self._call(self._set_cut(False))

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        with contextlib.suppress(RuntimeError, TimeoutError):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
        self._loop, self._thread = None, None

    def _call(self, coro: Coroutine[Any, Any, list[int]]) -> list[int]:
        if self._loop is None:
            coro.close()
            raise StackError(f"relay {self.name} is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # -- the loop's side

    async def _listen(self) -> list[int]:
        ports = []
        for target in self.targets:
            server = await asyncio.start_server(functools.partial(self._serve, target), HOST, 0)
            self._servers.append(server)
            ports.append(int(server.sockets[0].getsockname()[1]))
        return ports

    async def _set_cut(self, cut: bool) -> list[int]:
        self._cut = cut
        if cut:
            self._tainted |= self._open
        else:
            for client, upstream in self._tainted:
                for writer in (client, upstream):
                    if writer is not None:
                        writer.transport.abort()
            self._tainted.clear()
        log.info("relay %s: %s", self.name, "cut" if cut else "healed")
        return []

    async def _close(self) -> list[int]:
        for server in self._servers:
            server.close()
        for client, upstream in list(self._open):
            for writer in (client, upstream):
                if writer is not None:
                    writer.transport.abort()
        self._servers.clear()
        # Every connection's task ends here, so the loop stops with nothing pending.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        return []

    async def _serve(
        self, target: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self._cut:
            # A partition answers nothing: read and drop until the client gives up or heal().
            pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
            self._open.add(pair)
            self._tainted.add(pair)
            try:
                await self._pump(reader, None, pair)
            finally:
                self._forget(pair)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, target)
        except OSError:
            # The target is down (a killed etcd member): its port refuses, so does the relay.
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._open.add(pair)
        if self._cut:
            self._tainted.add(pair)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, pair),
                self._pump(up_reader, writer, pair),
                return_exceptions=True,
            )
        finally:
            self._forget(pair)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter | None,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None],
    ) -> None:
        """Copy one direction; while cut, or once a connection has lost bytes, drop them."""
        try:
            while data := await reader.read(CHUNK):
                if self._cut or pair in self._tainted or writer is None:
                    continue
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # One side closed (not while cut: a partition carries no FIN either).
            if not self._cut and pair not in self._tainted:
                for w in pair:
                    if w is not None:
                        w.close()

    def _forget(self, pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]) -> None:
        self._open.discard(pair)
        self._tainted.discard(pair)
        for w in pair:
            if w is not None:
                w.transport.abort()
