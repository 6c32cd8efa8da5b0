"""An unclosed asyncio stream's warning names the code that opened it (tests/support/streams)."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings

from tests.support.streams import name_stream_origins


async def _dropped_unclosed(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    # The peer says it is done: the stream stops reading, so only a cycle holds it now.
    assert await reader.read() == b""
    assert not writer.transport.is_closing()


async def test_an_unclosed_stream_names_where_it_was_opened() -> None:
    name_stream_origins()
    ours, peer = socket.socketpair()
    peer.shutdown(socket.SHUT_WR)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await _dropped_unclosed(ours)
            gc.collect()
    finally:
        peer.close()
    unclosed = [str(w.message) for w in caught if "unclosed <StreamWriter" in str(w.message)]
    assert len(unclosed) == 1, [str(w.message) for w in caught]
    assert "opened at:" in unclosed[0]
    assert "in _dropped_unclosed" in unclosed[0]


async def test_a_closed_stream_says_nothing() -> None:
    name_stream_origins()
    ours, peer = socket.socketpair()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, writer = await asyncio.open_connection(sock=ours)
            writer.close()
            await writer.wait_closed()
            del writer
            gc.collect()
    finally:
        peer.close()
    assert [str(w.message) for w in caught if "StreamWriter" in str(w.message)] == []
