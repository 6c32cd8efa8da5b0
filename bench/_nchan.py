"""nginx with nchan on a loopback port, from a configuration made under a temporary folder: the
push engine `bench.push --anchor nchan` measures the gateway's live push against."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from bench._common import BenchError
from omnium_live import stream_key

MODULE = Path("/usr/lib/nginx/modules/ngx_nchan_module.so")

# The gateway's two live routes, served by nchan: a Games' channel, and one per unit. Messages
# are POSTed to /pub/<channel>; each keeps the last 1,000 for EventSource's Last-Event-ID, as
# OMNIUM_LIVE_STREAM_LENGTH does; a new subscriber starts from now, as the gateway's streams do.
CONFIG = """
load_module %(module)s;
daemon off;
worker_processes %(workers)d;
worker_rlimit_nofile %(files)d;
pid %(home)s/nginx.pid;
error_log %(home)s/error.log warn;
%(user)s
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path %(home)s/body;
  proxy_temp_path %(home)s/proxy;
  fastcgi_temp_path %(home)s/fastcgi;
  uwsgi_temp_path %(home)s/uwsgi;
  scgi_temp_path %(home)s/scgi;
  nchan_shared_memory_size 256m;
  server {
    listen 127.0.0.1:%(port)d;
    location ~ ^/v1/events/([^/]+)/live$ {
      nchan_subscriber eventsource;
      nchan_channel_id $1;
      nchan_subscriber_first_message newest;
    }
    location ~ ^/v1/events/([^/]+)/units/([^/]+)/live$ {
      nchan_subscriber eventsource;
      nchan_channel_id $1/$2;
      nchan_subscriber_first_message newest;
    }
    location ~ ^/pub/(.+)$ {
      nchan_publisher;
      nchan_channel_id $1;
      nchan_message_buffer_length 1000;
      nchan_message_timeout 1h;
    }
    location = /healthz { return 200 "ok\\n"; }
  }
}
"""


@dataclass(slots=True)
class RunningNchan:
    url: str
    pid: int


def require_nchan() -> None:
    if shutil.which("nginx") is None or not MODULE.exists():
        raise BenchError(
            "--anchor nchan needs nginx and its nchan module: run 'make tools' (as root) or "
            "apt-get install nginx libnginx-mod-nchan"
        )


@contextlib.asynccontextmanager
async def running_nchan(port: int, workers: int) -> AsyncIterator[RunningNchan]:
    """nginx in the foreground with `workers` worker processes (the gateway's count)."""
    with tempfile.TemporaryDirectory(prefix="omnium-nchan-") as folder:
        home = Path(folder)
        user = ""
        if os.geteuid() == 0:
            # nginx runs its workers as nobody: they must reach the folders it makes here.
            user = "user nobody nogroup;"
            os.chmod(folder, 0o755)
        async with _nginx(home, port, workers, user) as running:
            yield running


@contextlib.asynccontextmanager
async def _nginx(home: Path, port: int, workers: int, user: str) -> AsyncIterator[RunningNchan]:
    config = home / "nginx.conf"
    config.write_text(
        CONFIG
        % {
            "module": MODULE,
            "workers": workers,
            "files": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
            "home": home,
            "user": user,
            "port": port,
        }
    )
    error_log = home / "error.log"
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    # Started here, waited on below without blocking the loop.
    process = subprocess.Popen(  # noqa: ASYNC220
        [nginx, "-p", f"{home}/", "-c", str(config), "-e", str(error_log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        async with aiohttp.ClientSession() as http:
            while True:
                if process.poll() is not None:
                    text = error_log.read_text() if error_log.exists() else ""
                    raise BenchError(f"nginx with nchan stopped at start: {text[-2000:]}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{url}/healthz") as answer:
                        if answer.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"nginx with nchan did not answer within 20 s; see {error_log}"
                    )
                await asyncio.sleep(0.05)
        yield RunningNchan(url, process.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, 20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await asyncio.to_thread(process.wait)


async def relay(redis: aioredis.Redis, nchan_url: str, event: str, ready: asyncio.Event) -> None:
    """What delivery publishes to the Games' Redis Stream, POSTed to nchan as it comes, to the
    Games' channel and to its unit's: the same payloads at the same moments as the gateway's
    reader fans out. Runs until cancelled."""
    key = stream_key(event)
    newest: Any = await redis.xrevrange(key, count=1)
    cursor = newest[0][0] if newest else b"0-0"
    ready.set()
    async with aiohttp.ClientSession() as http:
        while True:
            found: Any = await redis.xread({key: cursor}, count=100, block=1000)
            for _key, entries in found or ():
                for entry_id, fields in entries:
                    cursor = entry_id
                    data = fields[b"data"]
                    unit = fields.get(b"unit", b"").decode()
                    channels = [event, f"{event}/{unit}"] if unit else [event]
                    for channel in channels:
                        async with http.post(f"{nchan_url}/pub/{channel}", data=data) as answer:
                            if answer.status >= 300:
                                raise BenchError(
                                    f"nchan refused a message to {channel}: {answer.status} "
                                    f"{(await answer.text())[:200]}"
                                )
