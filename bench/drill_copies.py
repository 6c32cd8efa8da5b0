"""The copies drill: kill -9 and roll each service's copies under load, and count what was lost.

The HA profile as `make run-ha` runs it (dev/copies.py), on free ports: a Patroni
pair (synchronous standby), Redis, two copies of command, scoring, imports, delivery, the gateway
and admin, HAProxy in front of the HTTP copies (the gateway, the imports doorbell, admin), the
Scout simulator replaying a Games day and ringing the doorbell through HAProxy, the demo clients'
SFTP sink and a webhook receiver (this process). The load is the failover drill's: 20 scorers
tapping through the gateway's scorer routes as the console does (a tap not saved stays queued and
is sent again with the same client id), public API readers, a Scout run in flight; every request
goes through HAProxy, as clients' would.

Then two phases:

- kill_copy: copy 1 of each service in turn is killed with SIGKILL, its whole process group (the
  gateway's workers too); for imports, the copy holding the running import job, so the other
  copy must resume the run after the lease. The drill starts the copy again at once, as a
  kubelet would, and waits until it is ready and writes flow before the next.
- rolling_release: as a Deployment with maxUnavailable 0, each copy of each service in turn gets
  SIGTERM (its main process, as Kubernetes signals PID 1), is waited for until it has exited,
  is started again and waited for until it is ready (its ports, and its ready check for an HTTP
  copy) and HAProxy's check has seen it, then the next.

Afterwards everything is checked against the primary: taps answered saved and not there, actions
or import batches applied twice, changes no client got, feed versions sent twice. A drill, not a
test: it prints figures (`name: value`, the required ones last) and exits 0 when it ran. Each
copy's output is in <data-dir>/logs/<service>-<n>.log, its restarts marked in it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench._common import BenchError, free_port, say, wait_for_port
from bench._drill import (
    IN_FLIGHT,
    READER_KEY,
    ROOT,
    SCHEDULE,
    TOKEN,
    Load,
    Service,
    add_load_options,
    add_run_options,
    child_env,
    command_line,
    database,
    deliveries_settled,
    fetch,
    first_save_after,
    import_checks,
    migration_step,
    noisy_lines,
    receivers_app,
    run_drills,
    run_in_flight,
    say_diagnosis,
    seed_scorers,
    start_load,
    start_service,
    steady,
    tap_checks,
)
from dev.copies import (
    READY_PATH,  # the ready checks HAProxy reads
    addresses,
    two_copies,
)
from dev.games_day import services, set_up_demo
from omnium_delivery.sinks import ensure_keys
from omnium_devstack import RedisServer
from omnium_devstack.launcher import host_port
from omnium_devstack.roles import own_logins
from omnium_settings import Settings

# What the drill runs; the services in DOUBLED run in two copies, in the order they are faulted.
SERVICES = (
    "command", "scoring", "imports", "delivery", "gateway", "admin", "scout-sim", "client-sinks",
)  # fmt: skip
DOUBLED = ("command", "scoring", "imports", "delivery", "gateway", "admin")
PHASES = ("kill_copy", "rolling_release")
# Port settings, and the offsets the copies and HAProxy take from each (copies.py).
GRPC_PORTS = ("command", "scoring", "imports", "delivery")
HTTP_PORTS = ("gateway", "doorbell", "admin")
OTHER_PORTS = ("scout_simulator", "sftp_sink", "webhook_sink")

log = logging.getLogger("bench.drill_copies")


# --- the copies --------------------------------------------------------------------------------


@dataclass
class Copy:
    """One process the drill keeps running: a service's copy, HAProxy, the simulator, a sink."""

    name: str  # command-1, haproxy, scout-sim
    service: str  # command, haproxy, scout-sim
    argv: list[str]
    env: dict[str, str]
    ports: list[int]
    ready_urls: list[str]  # an HTTP copy's ready check, answered 200 once it takes requests
    run: Service | None = None
    starts: int = 0
    busy: bool = False  # the fault script has it in hand: the keeper leaves it alone
    unexpected: list[str] = field(default_factory=list)
    cwd: Path = ROOT

    @property
    def pid(self) -> int | None:
        if self.run is None or self.run.proc.returncode is not None:
            return None
        return self.run.proc.pid


class Fleet:
    """Starts the copies, checks they are ready, and (as a kubelet) starts again one that
    exits while the fault script is not working on it."""

    def __init__(self, copies: Sequence[Copy], logs: Path) -> None:
        self.copies = {c.name: c for c in copies}
        self.logs = logs
        self._keeper: asyncio.Task[None] | None = None

    def of(self, service: str) -> list[Copy]:
        return [c for c in self.copies.values() if c.service == service]

    async def start(self, copy: Copy) -> None:
        copy.run = await start_service(
            copy.name, copy.argv, copy.env, self.logs, append=copy.starts > 0, cwd=copy.cwd
        )
        copy.starts += 1

    async def ready(self, copy: Copy, within: float) -> None:
        """Its ports accept connections and its ready check (if any) answers 200."""
        assert copy.run is not None
        deadline = time.monotonic() + within
        for port in copy.ports:
            left = max(1.0, deadline - time.monotonic())
            await wait_for_port(copy.run.proc, port, copy.run.log, left, copy.name)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            for url in copy.ready_urls:
                while True:
                    if copy.run.proc.returncode is not None:
                        raise BenchError(
                            f"{copy.name} exited with {copy.run.proc.returncode} before it was "
                            f"ready (see {copy.run.log})"
                        )
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with http.get(url) as response:
                            if response.status == 200:
                                break
                    if time.monotonic() > deadline:
                        raise BenchError(f"{copy.name}: {url} did not answer 200 in {within:.0f} s")
                    await asyncio.sleep(0.1)

    async def kill9(self, copy: Copy) -> None:
        """SIGKILL to the copy's whole process group, and its exit waited for."""
        assert copy.run is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(copy.run.proc.pid, signal.SIGKILL)
        await copy.run.proc.wait()

    async def terminate(self, copy: Copy, grace: float) -> tuple[float, str]:
        """SIGTERM to the copy's main process (as Kubernetes signals a container's PID 1);
        after `grace` the group is killed, as the kubelet does after the grace period. What is
        left of the group once the main process exited is killed too (the container is gone).
        Returns the seconds it took to exit and how it exited."""
        assert copy.run is not None
        proc = copy.run.proc
        began = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
            how = f"exited {proc.returncode}"
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            how = f"still running {grace:.0f} s after SIGTERM: killed"
        took = time.monotonic() - began
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return took, how

    def keep(self) -> None:
        self._keeper = asyncio.create_task(self._keep())

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            for copy in self.copies.values():
                if copy.busy or copy.run is None or copy.run.proc.returncode is None:
                    continue
                what = f"{copy.name} exited by itself ({copy.run.proc.returncode})"
                copy.unexpected.append(what)
                say(f"{what}; starting it again")
                copy.busy = True
                try:
                    await asyncio.sleep(1.0)
                    await self.start(copy)
                finally:
                    copy.busy = False

    async def stop_all(self) -> None:
        """Every copy at once: SIGTERM to each group, SIGKILL after 20 s."""
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
        running = [c.run for c in self.copies.values() if c.run is not None]
        for copy in self.copies.values():
            copy.busy = True
        for run in running:
            if run.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.proc.pid, signal.SIGTERM)

        async def wait(run: Service) -> None:
            try:
                await asyncio.wait_for(run.proc.wait(), 20)
            except TimeoutError:
                say(f"{run.name} did not stop within 20 s of SIGTERM; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.proc.pid, signal.SIGKILL)
                await run.proc.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.proc.pid, signal.SIGKILL)

        await asyncio.gather(*(wait(r) for r in running))


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def drill_ports() -> dict[str, int]:
    """A free port for each setting, with the ports its copies and HAProxy take free too."""
    taken: set[int] = set()
    ports: dict[str, int] = {}
    for name in (*GRPC_PORTS, *HTTP_PORTS, *OTHER_PORTS):
        steps = (0, 100) if name in GRPC_PORTS else (0, 100, 200) if name in HTTP_PORTS else (0,)
        for _ in range(200):
            base = free_port()
            wanted = [base + s for s in steps]
            if wanted[-1] < 65536 and all(p not in taken and _port_free(p) for p in wanted):
                break
        else:
            raise BenchError("found no free ports for the copies")
        taken.update(wanted)
        ports[name] = base
    return ports


def cpu_seconds_by_group(fleet: Fleet) -> dict[tuple[str, int], float]:
    """CPU seconds so far of every process on the machine, keyed by (what, process group): a
    copy's whole group (the gateway's workers too), the drill, PostgreSQL, else its name."""
    copies = {c.run.proc.pid: c.name for c in fleet.copies.values() if c.run is not None}
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    out: dict[tuple[str, int], float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        group = int(fields[2])
        if group == 0:
            continue  # a kernel thread
        name = "drill" if int(entry) == me else copies.get(group, comm)
        key = (name, group)
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def cpu_top(before: dict[tuple[str, int], float], after: dict[tuple[str, int], float]) -> str:
    """The five that used the most CPU between two looks, in seconds."""
    used: dict[str, float] = {}
    for key, secs in after.items():
        used[key[0]] = used.get(key[0], 0.0) + max(0.0, secs - before.get(key, 0.0))
    top = sorted(used.items(), key=lambda item: -item[1])[:5]
    return ", ".join(f"{name} {secs:.1f}" for name, secs in top)


def make_copies(specs: Sequence[Any], env: dict[str, str], replay_seconds: float) -> list[Copy]:
    out = []
    for spec in specs:
        service = spec.name.rpartition("-")[0] if spec.name[-1:].isdigit() else spec.name
        extra = ["--replay-seconds-per-hour", str(replay_seconds)] if service == "scout-sim" else []
        ports, ready = [], []
        for _, url in spec.listens:
            host, port = host_port(url)
            ports.append(port)
            if url.startswith("http") and service in READY_PATH and spec.name != "haproxy":
                ready.append(f"http://{host}:{port}{READY_PATH[service]}")
        out.append(
            Copy(spec.name, service, command_line(spec, extra), env | dict(spec.env), ports, ready)
        )
    return out


# --- the import job ----------------------------------------------------------------------------


@dataclass
class Holder:
    """The running import job: its id, run and worker (host:pid:n:tag), and the copy it is in."""

    job_id: int
    run_id: str | None
    worker: str
    copy: Copy | None


async def job_holder(url: str, fleet: Fleet, run_id: str | None) -> Holder | None:
    rows = await fetch(
        url,
        "SELECT j.id, j.run_id::text AS run_id, j.worker FROM integration_job j "
        "  JOIN integration i ON i.id = j.integration_id "
        " WHERE i.code = $1 AND j.status = 'running' AND j.worker IS NOT NULL "
        " ORDER BY (j.run_id::text = $2) DESC NULLS LAST, j.started_at DESC LIMIT 1",
        SCHEDULE,
        run_id or "",
    )
    if not rows:
        return None
    worker = str(rows[0]["worker"])
    parts = worker.split(":")
    pid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1
    copy = next((c for c in fleet.of("imports") if c.pid == pid), None)
    return Holder(int(rows[0]["id"]), rows[0]["run_id"] or run_id, worker, copy)


async def find_holder(
    url: str, scout: str, fleet: Fleet, within: float, phase: str
) -> Holder | None:
    """A Scout run being applied (asked for if none is), and the copy whose worker holds it."""
    run_id, asked = await run_in_flight(url, scout, within)
    deadline = time.monotonic() + 10
    while run_id is not None and time.monotonic() < deadline:
        holder = await job_holder(url, fleet, run_id)
        if holder is not None and holder.copy is not None:
            say(
                f"{phase}: run {holder.run_id} in flight, job {holder.job_id} held by "
                f"{holder.copy.name} ({holder.worker})"
            )
            return holder
        await asyncio.sleep(0.1)
    say(f"{phase}: no import job held by a copy (run {run_id}, Scout run asked {asked})")
    return None


async def handover(
    url: str, holder: Holder, old: Service, since: float, within: float, settle: float
) -> tuple[float | None, str]:
    """Seconds from `since` until another worker continues the holder's run: a job of the run
    claimed by a worker other than the holder's, or the run's batch_done moving on once the old
    process has been gone `settle` seconds (a commit sent just before a kill may land after)."""
    deadline = time.monotonic() + within
    baseline: int | None = None
    gone_at: float | None = None
    while time.monotonic() < deadline:
        jobs = await fetch(
            url,
            "SELECT worker, status FROM integration_job WHERE id = $1 OR run_id = $2::uuid",
            holder.job_id,
            holder.run_id,
        )
        run = await fetch(
            url,
            "SELECT status, batch_done FROM integration_run WHERE id = $1::uuid",
            holder.run_id,
        )
        now = time.monotonic()
        others = [
            j
            for j in jobs
            if j["worker"] and j["worker"] != holder.worker and j["status"] != "queued"
        ]
        if others:
            return now - since, f"claimed by {others[0]['worker']} ({others[0]['status']})"
        status, done = (str(run[0]["status"]), int(run[0]["batch_done"] or 0)) if run else ("", 0)
        if old.proc.returncode is not None and gone_at is None:
            gone_at = now
        if gone_at is not None and now - gone_at >= settle:
            if baseline is None:
                baseline = done
            elif done > baseline:
                return now - since, f"batch_done {baseline} -> {done}"
        if status and status not in (*IN_FLIGHT, "partly_done"):
            return None, f"the run ended {status} before another copy took it"
        await asyncio.sleep(0.2)
    return None, f"no other copy continued the run within {within:.0f} s"


# --- the faults --------------------------------------------------------------------------------


@dataclass
class Faults:
    """What the fault script measured."""

    kill_gaps: dict[str, float] = field(default_factory=dict)  # first tap saved after a kill
    kill_ready: dict[str, float] = field(default_factory=dict)
    stops: dict[str, tuple[float, str]] = field(default_factory=dict)
    roll_ready: dict[str, float] = field(default_factory=dict)
    kill_resume_s: float | None = None
    kill_resume_how: str = "not measured"
    graceful_handover_s: float | None = None
    graceful_handover_how: str = "not measured"
    watchers: list[asyncio.Task[None]] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, the fault)


async def kill_phase(
    args: argparse.Namespace, load: Load, fleet: Fleet, faults: Faults, url: str, scout: str
) -> None:
    for service in DOUBLED:
        copies = fleet.of(service)
        victim = copies[0]
        holder: Holder | None = None
        if service == "imports":
            holder = await find_holder(url, scout, fleet, args.run_wait, "kill_copy")
            if holder is not None and holder.copy is not None:
                victim = holder.copy
        assert victim.run is not None
        victim.busy = True
        old = victim.run
        cpu = await asyncio.to_thread(cpu_seconds_by_group, fleet)
        killed = time.monotonic()
        faults.timeline.append((killed, f"kill -9 {victim.name}"))
        await fleet.kill9(victim)
        if holder is not None:
            resume = handover(url, holder, old, killed, args.lease_wait, 1.0)
            faults.watchers.append(asyncio.create_task(_kill_resume(faults, resume, victim)))
        saved = asyncio.create_task(first_save_after(load, killed, 120))
        await asyncio.sleep(args.restart_wait)
        await fleet.start(victim)
        await fleet.ready(victim, 90)
        faults.kill_ready[victim.name] = time.monotonic() - killed
        first = await saved
        faults.kill_gaps[victim.name] = first - killed if first is not None else math.nan
        top = cpu_top(cpu, await asyncio.to_thread(cpu_seconds_by_group, fleet))
        await asyncio.sleep(args.ready_pause)
        victim.busy = False
        say(
            f"kill_copy: {victim.name} kill -9 (its group); started again and ready after "
            f"{faults.kill_ready[victim.name]:.1f} s; first tap sent after it saved "
            f"{faults.kill_gaps[victim.name]:.1f} s after; CPU seconds meanwhile: {top}"
        )


async def _kill_resume(faults: Faults, resume: Any, victim: Copy) -> None:
    faults.kill_resume_s, faults.kill_resume_how = await resume
    took = "nan" if faults.kill_resume_s is None else f"{faults.kill_resume_s:.1f} s"
    say(f"kill_copy: the run {victim.name} held went on after {took}: {faults.kill_resume_how}")


async def _graceful_handover(faults: Faults, watch: Any, victim: Copy) -> None:
    faults.graceful_handover_s, faults.graceful_handover_how = await watch
    took = "nan" if faults.graceful_handover_s is None else f"{faults.graceful_handover_s:.1f} s"
    say(
        f"rolling_release: the run {victim.name} held went on after {took}: "
        f"{faults.graceful_handover_how}"
    )


async def rolling_phase(
    args: argparse.Namespace, fleet: Fleet, faults: Faults, url: str, scout: str
) -> None:
    for service in DOUBLED:
        copies = fleet.of(service)
        holder: Holder | None = None
        if service == "imports":
            holder = await find_holder(url, scout, fleet, args.run_wait, "rolling_release")
            if holder is not None and holder.copy is not None:
                copies = [holder.copy, *(c for c in copies if c is not holder.copy)]
        for copy in copies:
            assert copy.run is not None
            copy.busy = True
            old = copy.run
            cpu = await asyncio.to_thread(cpu_seconds_by_group, fleet)
            began = time.monotonic()
            faults.timeline.append((began, f"SIGTERM {copy.name}"))
            if holder is not None and copy is holder.copy:
                watch = handover(url, holder, old, began, args.lease_wait, 0.0)
                faults.watchers.append(asyncio.create_task(_graceful_handover(faults, watch, copy)))
            faults.stops[copy.name] = await fleet.terminate(copy, args.stop_grace)
            await fleet.start(copy)
            await fleet.ready(copy, 90)
            faults.roll_ready[copy.name] = time.monotonic() - began
            top = cpu_top(cpu, await asyncio.to_thread(cpu_seconds_by_group, fleet))
            # HAProxy checks every second (rise 1): the new copy is in before the next stops.
            await asyncio.sleep(args.ready_pause)
            copy.busy = False
            took, how = faults.stops[copy.name]
            say(
                f"rolling_release: {copy.name} SIGTERM: {how} after {took:.1f} s; started "
                f"again, ready {faults.roll_ready[copy.name]:.1f} s after the SIGTERM; CPU "
                f"seconds meanwhile: {top}"
            )


# --- the checks --------------------------------------------------------------------------------


_SFTP_LINE = re.compile(r"^sftp: (\S+) \((\d+) bytes, sha256 ([0-9a-f]+)\.\.\.\)")


def attribute(load: Load, faults: Faults) -> list[str]:
    """The answers that were not a success, by the fault made last before each."""
    counts: dict[str, Counter[str]] = {}
    latest: dict[str, float] = {}
    for at, kind, status in load.misses:
        when, what = 0.0, "before any fault"
        for made, fault in faults.timeline:
            if made <= at:
                when, what = made, fault
        counts.setdefault(what, Counter[str]())[f"{kind} {status}"] += 1
        latest[what] = max(latest.get(what, 0.0), at - when)
    return [
        f"not a success after {what}: {dict(n)} (the last {latest[what]:.1f} s after it)"
        for what, n in counts.items()
    ]


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def sent_twice(url: str, load: Load, sinks_log: Path) -> int:
    """Feed versions delivered twice: the same feed and version delivered in delivery_attempt
    more than once, or the same file (name and bytes) or webhook message received twice."""
    rows = await fetch(
        url,
        "SELECT f.id AS feed, c.code, f.kind, f.format, a.version, count(*) AS n, "
        "       count(*) FILTER (WHERE a.outcome = 'delivered') AS delivered "
        "  FROM delivery_attempt a JOIN client_feed f ON f.id = a.feed_id "
        "  JOIN client c ON c.id = a.client_id WHERE NOT a.resend "
        " GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1",
    )
    attempts = sum(int(r["delivered"]) - 1 for r in rows if r["delivered"] > 1)
    for row in rows[:8]:
        say(f"delivery_attempt: feed version sent more than once: {dict(row)}")
    files = Counter[tuple[str, str]]()
    text = await asyncio.to_thread(_read, sinks_log)
    for line in text.splitlines():
        found = _SFTP_LINE.match(line)
        if found:
            files[(found[1], found[3])] += 1
    twice_files = {k: n for k, n in files.items() if n > 1}
    twice_hooks = {k: n for k, n in load.hook_ids.items() if n > 1}
    received = sum(n - 1 for n in twice_files.values()) + sum(n - 1 for n in twice_hooks.values())
    say(
        f"delivery: {sum(files.values())} files and {sum(load.hook_ids.values())} webhooks "
        f"received; feed versions delivered twice by delivery_attempt {attempts} (rows of one "
        f"version, any outcome: {sum(int(r['n']) - 1 for r in rows)}), files received twice "
        f"{len(twice_files)}, webhook messages received twice {len(twice_hooks)}"
    )
    for what in [*list(twice_files)[:5], *list(twice_hooks)[:5]]:
        say(f"delivery: received twice: {what}")
    return max(attempts, received)


async def settle_and_check(
    args: argparse.Namespace,
    load: Load,
    fleet: Fleet,
    faults: Faults,
    url: str,
    data_dir: Path,
) -> dict[str, float | str]:
    began = time.monotonic()
    while True:
        rows = await fetch(
            url, "SELECT count(*) AS n FROM integration_run WHERE status = ANY($1::text[])",
            list(IN_FLIGHT),
        )  # fmt: skip
        if not rows[0]["n"] or time.monotonic() - began > args.settle_seconds:
            break
        await asyncio.sleep(2)
    missed = await deliveries_settled(url, data_dir / "sftp", load, began, args.settle_seconds)
    taps = await tap_checks(url, load)
    twice = await import_checks(url, load)
    doubled = await sent_twice(url, load, data_dir / "logs" / "client-sinks.log")
    await say_diagnosis(url, load)
    for line in attribute(load, faults):
        say(line)
    unexpected = [u for c in fleet.copies.values() for u in c.unexpected]
    if unexpected:
        say(f"copies that exited by themselves: {unexpected}")
    figures, required = phase_figures(load, taps, twice, missed)
    gaps = [g for g in faults.kill_gaps.values() if not math.isnan(g)]
    figures |= {
        "kill_copy_write_gap_s": max(gaps) if len(gaps) == len(faults.kill_gaps) else math.nan,
        "kill_copy_ready_s": max(faults.kill_ready.values(), default=math.nan),
        "rolling_release_stop_s": max((s for s, _ in faults.stops.values()), default=math.nan),
        "rolling_release_ready_s": max(faults.roll_ready.values(), default=math.nan),
        "copies_exited_by_themselves": len(unexpected),
    }
    graceful, resume = faults.graceful_handover_s, faults.kill_resume_s
    required |= {
        "graceful_import_handover_s": math.nan if graceful is None else graceful,
        "kill_import_resume_s": math.nan if resume is None else resume,
        "delivery_sent_twice": doubled,
    }
    return figures | required


def phase_figures(
    load: Load,
    taps: Mapping[str, Mapping[str, float]],
    twice: Mapping[str, int],
    missed: Mapping[str, Sequence[str]],
) -> tuple[dict[str, float | str], dict[str, float | str]]:
    """Each phase's figures, and the ones its target is on (required), said as they are made."""
    figures: dict[str, float | str] = {}
    required: dict[str, float | str] = {}
    for name in PHASES:
        answers = load.answers[name]
        api_errors = sum(n for status, n in answers.items() if status not in ("200", "304"))
        scorer_errors = sum(n for status, n in load.syncs[name].items() if status != "200")
        say(f"{name}: public API answers {dict(answers)}")
        say(f"{name}: scorer sync answers (HTTP) {dict(load.syncs[name])}")
        say(
            f"{name}: taps saved without an answer saying so "
            f"{taps[name]['taps_stored_unanswered']}; taps sent more than once "
            f"{taps[name]['taps_resent']}"
        )
        figures |= {
            f"{name}_taps": taps[name]["taps"],
            f"{name}_taps_saved": taps[name]["taps_saved"],
            f"{name}_tap_p50_ms": taps[name]["tap_p50_ms"],
            f"{name}_tap_p99_ms": taps[name]["tap_p99_ms"],
            f"{name}_duplicates": taps[name]["duplicates"],
            f"{name}_import_batches_twice": twice[name],
            f"{name}_delivery_missed": len(missed[name]),
        }
        required |= {
            f"{name}_acked_lost": taps[name]["acked_lost"],
            f"{name}_api_errors": api_errors,
        }
        if name == "kill_copy":
            figures["kill_copy_scorer_errors"] = scorer_errors
            required["kill_copy_scorer_retries"] = taps[name]["scorer_retries"]
        else:
            figures["rolling_release_scorer_retries"] = taps[name]["scorer_retries"]
            required["rolling_release_scorer_errors"] = scorer_errors
    return figures, required


# --- one run -----------------------------------------------------------------------------------


@dataclass
class Stack:
    """The HA profile as the drill runs it: what a phase script (or another drill) works on."""

    args: argparse.Namespace
    load: Load
    cluster: Any  # PatroniCluster
    redis: Any  # RedisServer
    fleet: Fleet
    url: str  # the database URL every service was given
    settings: Any
    units: list[tuple[str, str]]
    data_dir: Path


async def one_run(args: argparse.Namespace, run_no: int) -> dict[str, float | str]:
    return await with_stack(args, run_no, Load(PHASES), _load_and_faults)


async def with_stack(
    args: argparse.Namespace,
    run_no: int,
    load: Load,
    then: Callable[[Stack], Awaitable[dict[str, float | str]]],
    *,
    database_url: Callable[[Any], str] | None = None,
    ready: Callable[[Any], Awaitable[None]] | None = None,
    cluster_options: dict[str, Any] | None = None,
) -> dict[str, float | str]:
    """The Patroni pair, Redis and two copies of every service up, the demo set up and the
    scorers seeded; then `then(stack)`, and everything stopped whatever happens.
    `database_url(cluster)` is the URL the services get (HAProxy's route by default);
    `ready(cluster)` runs once the pair leads and streams; `cluster_options` go to the
    PatroniCluster (bench._drill.database)."""
    # SIGTERM stops the drill as Ctrl-C does: the task is cancelled and every finally runs.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    if shutil.which("haproxy") is None:
        raise BenchError("HAProxy is not installed: run 'make system-ha' (as root)")
    data_dir = args.data_dir.resolve()
    shutil.rmtree(data_dir, ignore_errors=True)
    logs = data_dir / "logs"
    logs.mkdir(parents=True)
    async with database(data_dir, **(cluster_options or {})) as cluster:
        if ready is not None:
            await ready(cluster)
        redis = RedisServer(data_dir, 0)
        await asyncio.to_thread(redis.start)
        try:
            url = database_url(cluster) if database_url else cluster.database_url
            return await _with_servers(args, run_no, load, (cluster, redis, url), then)
        finally:
            await asyncio.to_thread(redis.stop)


async def _with_servers(
    args: argparse.Namespace,
    run_no: int,
    load: Load,
    database_parts: tuple[Any, Any, str],
    then: Callable[[Stack], Awaitable[dict[str, float | str]]],
) -> dict[str, float | str]:
    cluster, redis, url = database_parts
    redis_url = redis.redis_url
    data_dir = args.data_dir.resolve()
    logs = data_dir / "logs"
    await migration_step(url, child_env({}), logs)
    ports = drill_ports()
    values = {f"OMNIUM_{name.upper()}_PORT": str(port) for name, port in ports.items()}
    values |= {
        "OMNIUM_DATABASE_URL": url,
        "OMNIUM_REDIS_URL": redis_url,
        "OMNIUM_DATABASE_STANDBY_EXPECTED": "true",
        "OMNIUM_GRPC_CALLERS": f"bench:service:{TOKEN}",
        "OMNIUM_GRPC_TOKEN": TOKEN,
        "OMNIUM_GATEWAY_API_KEYS": f"drill:{READER_KEY}:10000:10000",
        "OMNIUM_LOG_LEVEL": "INFO",
        # The drill's receivers and Scout simulator listen on this machine.
        "OMNIUM_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
    }
    settings = Settings.from_env(values)
    values |= addresses(settings)
    env = child_env(values)
    secret = "drill-scout-secret-" + os.urandom(6).hex()
    (data_dir / "scout-secret").write_text(secret + "\n")
    ensure_keys(data_dir / "sftp-keys")
    (data_dir / "webhook-secret").write_text("whsec_ZHJpbGwtd2ViaG9vay1zZWNyZXQtMDEyMzQ1Njc4OQ==\n")
    # The webhook client is this process (it keeps each body); the sink takes the SFTP files.
    sink_settings = settings.replace(webhook_sink_port=free_port())
    # Each service as its own database role, as production runs them.
    specs = [s for s in services(settings, data_dir / "scout-secret") if s.name in SERVICES]
    specs = own_logins(specs, url)
    specs = [
        next(t for t in services(sink_settings, data_dir / "scout-secret") if t.name == s.name)
        if s.name == "client-sinks"
        else s
        for s in specs
    ]
    fleet = Fleet(
        make_copies(two_copies(specs, settings, data_dir), env, args.replay_seconds_per_hour),
        logs,
    )
    hooks = web.AppRunner(receivers_app(load), access_log=None, shutdown_timeout=1)
    await hooks.setup()
    await web.TCPSite(hooks, "127.0.0.1", ports["webhook_sink"]).start()
    try:
        began = time.monotonic()
        for copy in fleet.copies.values():
            await fleet.start(copy)
        for copy in fleet.copies.values():
            await fleet.ready(copy, 120)
        fleet.keep()
        say(
            f"services: {', '.join(fleet.copies)} up after {time.monotonic() - began:.0f} s "
            f"(logs in {logs}); HAProxy on {settings.gateway.port} (gateway), "
            f"{settings.imports.doorbell_port} (doorbell), {settings.admin.port} (admin)"
        )
        # The demo's integrations and clients: ndtv by SFTP, dailyhunt by webhook (to us).
        await set_up_demo(url, settings, secret, data_dir)
        units = await seed_scorers(url, args.scorers)
        stack = Stack(args, load, cluster, redis, fleet, url, settings, units, data_dir)
        figures = await then(stack)
    finally:
        load.stopping.set()
        await fleet.stop_all()
        await hooks.cleanup()
        for copy in fleet.copies.values():
            lines = noisy_lines(logs / f"{copy.name}.log")
            if lines:
                say(f"{copy.name} log: {len(lines)} error lines, first: {lines[0][:300]}")
    say(f"run {run_no} done")
    return figures


async def _load_and_faults(stack: Stack) -> dict[str, float | str]:
    args, load, fleet, url = stack.args, stack.load, stack.fleet, stack.url
    settings, units, data_dir = stack.settings, stack.units, stack.data_dir
    base = f"http://127.0.0.1:{settings.gateway.port}"  # HAProxy
    scout = f"http://127.0.0.1:{settings.dev.scout_simulator_port}"
    tasks = start_load(load, base, units, args)
    faults = Faults()
    load.begin("kill_copy")
    began = time.monotonic()
    try:
        await steady(load, args.steady_seconds)
        say(f"steady: {sum(t.saved is not None for t in load.taps)} taps saved")
        await kill_phase(args, load, fleet, faults, url, scout)
        await asyncio.gather(*faults.watchers)
        faults.watchers.clear()
        await asyncio.sleep(args.seconds)
        say(f"kill_copy: done after {time.monotonic() - began:.0f} s")
        load.begin("rolling_release")
        began = time.monotonic()
        await steady(load, args.steady_seconds / 2)
        await rolling_phase(args, fleet, faults, url, scout)
        await asyncio.sleep(args.seconds)
        await asyncio.gather(*faults.watchers)
        say(f"rolling_release: done after {time.monotonic() - began:.0f} s")
    except BaseException:
        # Stopped (Ctrl-C) or failed: no waiting for queues, straight to stopping everything.
        for task in (*tasks, *faults.watchers):
            task.cancel()
        await asyncio.gather(*tasks, *faults.watchers, return_exceptions=True)
        raise
    load.stopping.set()
    say("load stopped; the scorers send what is still queued")
    await asyncio.gather(*tasks, return_exceptions=True)
    return await settle_and_check(args, load, fleet, faults, url, data_dir)


# --- entry -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drill_copies", description=__doc__)
    add_load_options(
        parser, seconds=8.0, seconds_help="load kept going after each phase's faults", steady=10.0
    )
    parser.add_argument(
        "--lease-wait",
        type=float,
        default=100.0,
        help="longest wait for another imports copy to continue a run (the lease is 60 s)",
    )
    parser.add_argument(
        "--restart-wait", type=float, default=0.5, help="a killed copy is started this much later"
    )
    parser.add_argument(
        "--ready-pause",
        type=float,
        default=2.0,
        help="after a copy is ready, before the next fault (HAProxy checks every second)",
    )
    parser.add_argument(
        "--stop-grace",
        type=float,
        default=30.0,
        help="seconds a copy has to exit after SIGTERM before it is killed",
    )
    add_run_options(parser, settle=60.0, seed=20261201, data_dir=ROOT / ".omnium" / "drill-copies")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run_drills("drill_copies", parse_args(argv), one_run)


if __name__ == "__main__":
    sys.exit(main())
