"""A real Varnish (with xkey) running deploy/varnish/omnium.vcl in front of a gateway: the
shared-cache tests and `make bench-api` start it the same way."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

VCL = Path(__file__).resolve().parents[2] / "deploy" / "varnish" / "omnium.vcl"


@dataclass(slots=True)
class RunningVarnish:
    url: str
    workdir: Path

    async def counter_reaches(self, name: str, at_least: int) -> int:
        """A varnishstat counter once it reaches `at_least` (workers publish theirs in batches),
        or its value after 5 s."""
        deadline = time.monotonic() + 5
        value = self.counter(name)
        while value < at_least and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            value = self.counter(name)
        return value

    def counter(self, name: str) -> int:
        """One varnishstat counter, e.g. MAIN.cache_hit."""
        return self.counters(name)[name]

    def counters(self, *names: str) -> dict[str, int]:
        """Several varnishstat counters read at one moment, by name."""
        filters = [arg for name in names for arg in ("-f", name)]
        done = subprocess.run(
            ["varnishstat", "-n", str(self.workdir), "-1", *filters],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        values = {}
        for name in names:
            found = re.search(rf"^{re.escape(name)}\s+(\d+)", done.stdout, re.MULTILINE)
            assert found is not None, done.stdout
            values[name] = int(found[1])
        return values


def vcl_for(backend_port: int) -> str:
    """The deployed VCL, its backend moved to the gateway under test."""
    text = VCL.read_text()
    moved, count = re.subn(r'\.port = "\d+";', f'.port = "{backend_port}";', text, count=1)
    assert count == 1, "deploy/varnish/omnium.vcl names no backend port"
    return moved


@contextlib.asynccontextmanager
async def running_varnish(port: int, backend_port: int) -> AsyncIterator[RunningVarnish]:
    """varnishd in the foreground on `port`, no jail (the test's own user), 64 MB in memory."""
    varnishd = shutil.which("varnishd") or "/usr/sbin/varnishd"
    with tempfile.TemporaryDirectory(prefix="omnium-varnish-") as tmp:
        workdir = Path(tmp) / "n"
        vcl = Path(tmp) / "omnium.vcl"
        vcl.write_text(vcl_for(backend_port))
        command = [
            varnishd, "-F", "-j", "none", "-n", str(workdir),
            "-a", f"127.0.0.1:{port}", "-T", "none", "-f", str(vcl), "-s", "malloc,64m",
        ]  # fmt: skip
        # Starting it does not wait on it; its output is read only if it stops at start-up.
        process = subprocess.Popen(  # noqa: ASYNC220
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own group: the manager and its cache child stop together.
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            # The gateway may run in this event loop: wait without blocking it.
            deadline = time.monotonic() + 20
            async with httpx.AsyncClient(timeout=1) as http:
                while True:
                    if process.poll() is not None:
                        assert process.stdout is not None
                        raise RuntimeError(f"varnishd stopped: {process.stdout.read()[-2000:]}")
                    with contextlib.suppress(httpx.HTTPError):
                        if (await http.get(f"{url}/healthz")).status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        raise RuntimeError("varnishd did not answer within 20 s")
                    await asyncio.sleep(0.05)
            yield RunningVarnish(url, workdir)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
