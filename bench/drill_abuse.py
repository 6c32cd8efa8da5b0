"""Drill: 20 scorers tap while strangers hammer the public doors of one gateway.

The gateway runs as production runs it (`python -m omnium_gateway`, two workers, Redis, behind a
proxy it trusts: the drill sends X-Forwarded-For as HAProxy would). Scorers tap from four venue
addresses, first on a quiet gateway, then while attackers from 50 addresses send 500 sign-ins
with wrong passwords all at once (to the scorers' own logins and to made-up ones) and 1,000
provider pushes with a wrong key. The attackers run in a process of their own at nice 19: their
machines are not ours, so their CPU must not count as the gateway's. Prints, from the same run:

  quiet_scorer_p95_ms        scorers' tap to saved, quiet gateway
  abuse_scorer_p95_ms        the same under abuse (target <= 50)
  abuse_scorer_p95_ratio     abuse / quiet
  abuse_gateway_rss_mb       peak RSS of every gateway process together (target <= 512)
  abuse_accepted             attackers' requests answered 2xx (must be 0)
  abuse_answers_<status>     how the attackers were answered

and exits 1 when a figure misses its target (2 when the drill itself could not run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import random
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import (
    BenchError,
    database_url_for,
    drop,
    free_port,
    percentile,
    recreate,
    rss_mb,
    say,
    servers,
)
from bench.scoring import PASSWORD, PIDS, process, seed
from omnium_devstack.stack import dev_process_environ

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "omnium_drill_abuse"
EVENT = "AG2026"
PROVIDER = "drill-feed"
PROXY = "127.0.0.1/32"
TARGETS = {"abuse_scorer_p95_ms": 50.0, "abuse_gateway_rss_mb": 512.0, "abuse_accepted": 0.0}


@dataclass
class Figures:
    quiet: list[float] = field(default_factory=list)
    abuse: list[float] = field(default_factory=list)
    answers: Counter[int] = field(default_factory=Counter)
    peak_rss_mb: float = 0.0
    phase: str = "warm"
    # (ms since the attack began, ms the tap took), to show where the slow taps fell.
    abuse_at: list[tuple[float, float]] = field(default_factory=list)
    attack_began: float = 0.0


def provider_file(folder: Path, key: str) -> None:
    """A push provider as production registers one: only the key's hash in the file."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    (folder / f"{PROVIDER}.toml").write_text(
        f'code = "{PROVIDER}"\nname = "Drill feed"\nformat = "odf"\nmode = "push"\n'
        f'event = "{EVENT}"\napi_key_sha256 = "{digest}"\n\n'
        '[actions]\nGOAL = "goal"\nPERIOD_START = "start_period"\n'
    )


def venue(n: int) -> dict[str, str]:
    """Scorers come from four venues' networks (many scorers share one NAT address)."""
    return {"X-Forwarded-For": f"198.51.100.{n % 4 + 1}"}


async def sign_in(http: aiohttp.ClientSession, n: int) -> str:
    """Sign in as a scorer's phone does: a busy answer (503 or 429) is tried again after its
    Retry-After, for up to 30 s. The CSRF token of the session."""
    deadline = time.monotonic() + 30
    while True:
        payload = {"login": f"scorer{n}", "password": PASSWORD}
        async with http.post("/score/api/sign-in", json=payload) as response:
            if response.status == 200:
                return str((await response.json())["csrf"])
            text = await response.text()
            if response.status not in (429, 503) or time.monotonic() > deadline:
                raise BenchError(f"scorer{n} could not sign in: {text}")
            await asyncio.sleep(float(response.headers.get("Retry-After", "1")))


async def scorer(
    base: str, n: int, unit: str, figures: Figures, stop: asyncio.Event, think_ms: float
) -> None:
    rng = random.Random(n)
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(base_url=base, cookie_jar=jar, headers=venue(n)) as http:
        csrf = await sign_in(http, n)
        path = f"/score/api/matches/{unit}/actions"
        for i in range(1_000_000):
            if stop.is_set():
                return
            kind = {"kind": "start_period"} if i == 0 else {"kind": "goal", "side": 1 + i % 2}
            body = {"client_id": f"drill{n}:{i}", "client_at": time.time() * 1000, **kind}
            phase = figures.phase
            began = time.perf_counter()
            async with http.post(path, json=body, headers={"X-CSRF-Token": csrf}) as response:
                answer = await response.json()
            took = (time.perf_counter() - began) * 1000
            if answer.get("outcome") != "saved":
                raise BenchError(f"scorer{n} tap {i} ({response.status}): {answer}")
            if phase == "quiet":
                figures.quiet.append(took)
            elif phase == "abuse":
                figures.abuse.append(took)
                figures.abuse_at.append(((began - figures.attack_began) * 1000, took))
            await asyncio.sleep(rng.expovariate(1000 / think_ms))


async def attack(base: str, sign_ins: int, pushes: int, body: bytes) -> Counter[int]:
    """`sign_ins` wrong-password sign-ins all at once, and `pushes` wrong-key provider pushes,
    from 50 addresses; every answer counted by status (0: none came)."""
    answers: Counter[int] = Counter()
    rng = random.Random(7)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(base_url=base, connector=connector, timeout=timeout) as http:

        async def once(method: str, path: str, **kw: Any) -> None:
            headers = {"X-Forwarded-For": f"203.0.113.{rng.randrange(50)}", **kw.pop("headers")}
            try:
                async with http.request(method, path, headers=headers, **kw) as response:
                    await response.read()
                    answers[response.status] += 1
            except (aiohttp.ClientError, TimeoutError):
                answers[0] += 1

        def sign_in(i: int) -> Any:
            login = f"scorer{i % 20}" if i % 2 else f"guess{i}"
            payload = {"login": login, "password": f"wrong {i}"}
            return once("POST", "/score/api/sign-in", json=payload, headers={})

        def push(i: int) -> Any:
            key = {"X-Api-Key": f"stolen-{i}", "Content-Type": "application/xml"}
            return once("POST", f"/v1/providers/{PROVIDER}/messages", data=body, headers=key)

        gate = asyncio.Semaphore(200)

        async def gated(make: Any, i: int) -> None:
            async with gate:
                await make(i)

        await asyncio.gather(
            *(sign_in(i) for i in range(sign_ins)),
            *(gated(push, i) for i in range(pushes)),
        )
    return answers


async def attack_from_elsewhere(base: str, args: argparse.Namespace) -> Counter[int]:
    """The attack from a process of its own at the lowest CPU priority: attackers' machines
    are not ours, so their CPU must neither slow the scorers' clients (one event loop would)
    nor take the server's share of this machine's two cores."""
    proc = await asyncio.create_subprocess_exec(
        "nice",
        "-n",
        "19",
        sys.executable,
        "-m",
        "bench.drill_abuse",
        "attack",
        "--base",
        base,
        "--sign-ins",
        str(args.sign_ins),
        "--pushes",
        str(args.pushes),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise BenchError(f"the attacking process exited {proc.returncode}")
    return Counter({int(status): n for status, n in json.loads(out).items()})


def tree(pid: int) -> list[int]:
    """A process and all its children (the gateway's workers), from /proc."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
            todo.extend(int(c) for c in children)
    return found


async def watch_rss(pid: int, figures: Figures, stop: asyncio.Event) -> None:
    while not stop.is_set():
        total = 0.0
        for member in tree(pid):
            with contextlib.suppress(OSError, BenchError):
                total += rss_mb(member)
        if figures.phase == "abuse":
            figures.peak_rss_mb = max(figures.peak_rss_mb, total)
        await asyncio.sleep(0.1)


async def run(server_url: str, redis_url: str, args: argparse.Namespace) -> dict[str, float]:
    db_url = database_url_for(server_url, DB_NAME)
    await recreate(server_url, DB_NAME)
    try:
        units = await seed(db_url, args.scorers)
        ports = {"command": free_port(), "scoring": free_port(), "gateway": free_port()}
        token = secrets.token_hex(32)
        with tempfile.TemporaryDirectory(prefix="drill-abuse-") as tmp:
            folder = Path(tmp)
            providers = folder / "providers"
            providers.mkdir()
            provider_file(providers, secrets.token_hex(32))
            env = dev_process_environ()
            env |= {
                "OMNIUM_ENVIRONMENT": "development",
                "OMNIUM_DATABASE_URL": db_url,
                "OMNIUM_REDIS_URL": redis_url,
                "OMNIUM_GRPC_CALLERS": f"drill:service:{token}",
                "OMNIUM_GRPC_TOKEN": token,
                "OMNIUM_COMMAND_PORT": str(ports["command"]),
                "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{ports['command']}",
                "OMNIUM_SCORING_PORT": str(ports["scoring"]),
                "OMNIUM_SCORING_ADDRESS": f"127.0.0.1:{ports['scoring']}",
                "OMNIUM_SCORING_PROVIDERS_DIR": str(providers),
                "OMNIUM_GATEWAY_PORT": str(ports["gateway"]),
                "OMNIUM_GATEWAY_WORKERS": "2",
                "OMNIUM_TRUSTED_PROXIES": PROXY,
                "OMNIUM_COMMAND_METRICS_PORT": "0",
                "OMNIUM_SCORING_METRICS_PORT": "0",
                "OMNIUM_GATEWAY_METRICS_PORT": "0",
                "OMNIUM_LOG_LEVEL": "WARNING",
            }
            env |= dict(item.split("=", 1) for item in args.setting)
            async with (
                process("command", ["-m", "omnium_command"], env, ports["command"], folder),
                process("scoring", ["-m", "omnium_scoring"], env, ports["scoring"], folder),
                process("gateway", ["-m", "omnium_gateway"], env, ports["gateway"], folder),
            ):
                base = f"http://127.0.0.1:{ports['gateway']}"
                figures, stop = Figures(), asyncio.Event()
                watcher = asyncio.create_task(watch_rss(PIDS["gateway"], figures, stop))
                tasks = [
                    asyncio.create_task(scorer(base, n, units[n], figures, stop, args.think_ms))
                    for n in range(args.scorers)
                ]
                try:
                    await asyncio.sleep(5)  # signed in (busy answers waited out) and warm
                    say("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
                    figures.phase = "quiet"
                    await asyncio.sleep(args.quiet_seconds)
                    say(f"abuse: {args.sign_ins} sign-ins at once, {args.pushes} pushes")
                    figures.phase = "abuse"
                    began = figures.attack_began = time.perf_counter()
                    figures.answers = await attack_from_elsewhere(base, args)
                    say(f"abuse answered in {time.perf_counter() - began:.1f} s")
                    await asyncio.sleep(1)
                    figures.phase = "after"
                    say("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
                finally:
                    stop.set()
                    await asyncio.gather(*tasks, watcher)
        for at, took in sorted(figures.abuse_at, key=lambda tap: -tap[1])[:3]:
            say(f"a slow tap: {took:.1f} ms, {at:.0f} ms after the attack began")
        if not figures.quiet or not figures.abuse:
            raise BenchError("the scorers saved nothing in a phase; see the processes' logs")
        quiet_p95 = percentile(figures.quiet, 95)
        abuse_p95 = percentile(figures.abuse, 95)
        accepted = sum(n for status, n in figures.answers.items() if 200 <= status < 300)
        result = {
            "quiet_scorer_p50_ms": percentile(figures.quiet, 50),
            "quiet_scorer_p95_ms": quiet_p95,
            "abuse_scorer_p50_ms": percentile(figures.abuse, 50),
            "abuse_scorer_p95_ms": abuse_p95,
            "abuse_scorer_p99_ms": percentile(figures.abuse, 99),
            "abuse_scorer_p95_ratio": abuse_p95 / quiet_p95,
            "abuse_scorer_taps": float(len(figures.abuse)),
            "abuse_gateway_rss_mb": figures.peak_rss_mb,
            "abuse_accepted": float(accepted),
        }
        for status, n in sorted(figures.answers.items()):
            result[f"abuse_answers_{status or 'none'}"] = float(n)
        return result
    finally:
        await drop(server_url, DB_NAME)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drill_abuse", description=__doc__)
    parser.add_argument("mode", nargs="?", default="drill", choices=("drill", "attack"))
    parser.add_argument("--base", help="attack: the gateway's address")
    parser.add_argument("--scorers", type=int, default=20)
    parser.add_argument("--sign-ins", type=int, default=500, help="wrong sign-ins, all at once")
    parser.add_argument("--pushes", type=int, default=1000, help="wrong-key provider pushes")
    parser.add_argument("--quiet-seconds", type=float, default=10.0)
    parser.add_argument("--think-ms", type=float, default=500.0, help="a scorer's mean pause")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="OMNIUM_NAME=VALUE",
        help="a setting for the services (to see the drill fail with a protection taken away)",
    )
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".omnium" / "drill-abuse")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.mode == "attack":
        body = (ROOT / "tests" / "data" / "odf_play_by_play.xml").read_bytes()
        answers = asyncio.run(attack(args.base, args.sign_ins, args.pushes, body))
        print(json.dumps(answers))
        return 0
    try:
        with servers(args.data_dir) as (server_url, redis_url):
            figures = asyncio.run(run(server_url, redis_url, args))
    except BenchError as exc:
        print(f"drill_abuse: {exc}", file=sys.stderr, flush=True)
        return 2
    print()
    for name, value in figures.items():
        print(
            f"{name}: {value:.3f}" if name.endswith(("_ms", "_ratio")) else f"{name}: {value:.1f}"
        )
    missed = [
        f"{name} {figures[name]:.1f} (target {'<=' if target else '='} {target:g})"
        for name, target in TARGETS.items()
        if figures[name] > target
    ]
    for miss in missed:
        print(f"MISSED: {miss}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
