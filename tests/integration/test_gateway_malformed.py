"""A request aiohttp cannot parse is the client's mistake, answered 400: the gateway logs it as
one INFO line, not an ERROR with a traceback (a fuzzer or a port scan would fill the log)."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

from tests.support.gateway import gateway_env
from tests.support.servers import Servers

GARBAGE = [
    b"GET /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n",
    b"GET / HTTP/1.1\r\nBad Header Line\r\n\r\n",
]


async def _send(host: str, port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(raw)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    return answer


async def test_malformed_requests_are_one_info_line_each(
    database_url: str, servers: Servers, tmp_path: Path
) -> None:
    log_file = tmp_path / "gateway.log"
    env = gateway_env(database_url, servers.redis_url, log_level="INFO", gateway_workers="1")
    with log_file.open("w") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "omnium_gateway", env=env, stdout=PIPE, stderr=log
        )
        try:
            assert process.stdout is not None
            line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
            found = re.search(r"http://([\d.]+):(\d+)", line)
            assert found is not None, line
            answers = [await _send(found[1], int(found[2]), raw) for raw in GARBAGE]
        finally:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 20)
    text = log_file.read_text()
    assert all(re.match(rb"HTTP/1\.[01] 400 ", answer) for answer in answers), answers
    # aiohttp reports two of the three (a request line that is not HTTP at all it answers
    # without a word): each is one line, beginning with its time, naming what was wrong.
    refused = [line for line in text.splitlines() if "refused a malformed HTTP request" in line]
    assert len(refused) == 2, text
    assert "Content-Length: nope" in refused[0] and "Bad Header Line" in refused[1], refused
    assert all(re.match(r"\d{4}-\d\d-\d\d ", line) for line in text.splitlines() if line), text
    assert "Traceback" not in text and "Error handling request" not in text, text
