"""The release drill: roll from the previous version to this one under load, then roll back.

The HA profile as `make run-ha` runs it (dev/copies.py), on free ports: a Patroni pair
(synchronous standby), Redis, two copies of command, scoring, imports, delivery, the gateway and
admin, HAProxy in front of the HTTP copies, the Scout simulator replaying a Games day and ringing
the doorbell through HAProxy, the demo clients' SFTP sink and a webhook receiver (this process).
Each service connects as its own database role, the migration step as the migration role
(libs/omnium_devstack/roles.py). The load is the failover drill's: 20 scorers tapping through
the gateway's scorer routes as the console does, public API readers, Scout runs in flight.

**The two versions are two checkouts' code, not two images.** The previous version is the
previous release (dev/previous_release.py: the newest release tag below HEAD, else the newest
commit whose schema is older than today's, so the release carries a migration), checked out
with `git worktree` under <data-dir>/../releases/<commit> and kept there (a rerun reuses it);
its processes run from that checkout's sources on this venv's packages, as
tests/integration/test_previous_release.py runs them. Building and running two images per run
(twelve containers on the host network, in production mode with TLS) would cost this 2-core
machine more than the drill itself; `make run-image` and test_image_run.py hold the image.
The database's roles are this version's roles.sql, applied after each migration step (the
previous release's predates the services connecting as their roles).

The drill:

- set-up: the previous version's migration step (`python -m omnium_db migrate` of its code),
  every service copy started from the previous version, the load started;
- release: this version's migration step, as the Kubernetes Job runs it before the Deployments
  roll, then each copy of each service in turn gets SIGTERM (its main process, as Kubernetes
  signals PID 1), is waited for, is started again from this version and waited for until it is
  ready and HAProxy's check has seen it, then the next (maxUnavailable 0, one at a time);
- rollback: the same roll back to the previous version's code, on the schema this version made
  (`kubectl rollout undo`; the migration is not undone: expand, then contract).

A copy that does not come up ready halts its phase's roll, as a Deployment's rollout halts, and
counts in `<phase>_copies_failed`. Afterwards everything is checked against the primary: taps
answered saved and not there, public API answers that were not 200/304, scorer syncs that were
not 200. It prints figures (`name: value`) and exits 1 when one of the targets (each 0) is
missed: `release_acked_lost`, `rollback_acked_lost`, `release_api_errors`,
`rollback_api_errors`, `release_scorer_errors`, `rollback_scorer_errors`,
`release_copies_failed`, `rollback_copies_failed`. `release_seconds` is from the migration
step's start to the last copy of this version ready.

To see it fail with a protection taken away: `--previous-ahead-allowed 0` makes the previous
version refuse a newer schema, as every release did before expand-then-contract (the rollback
halts at its first copy). `--stop-signal KILL` stops each copy without draining: it shows what
HAProxy's `retry-on` and the clients' resends cover (a run lost nothing and answered no error),
not a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from bench._common import BenchError, free_port, say
from bench._drill import (
    READER_KEY,
    ROOT,
    TOKEN,
    Load,
    add_load_options,
    add_run_options,
    child_env,
    database,
    deliveries_settled,
    import_checks,
    migration_step,
    noisy_lines,
    print_figures,
    receivers_app,
    run_in_flight,
    say_diagnosis,
    seed_scorers,
    start_load,
    steady,
    tap_checks,
)
from bench.drill_copies import DOUBLED, SERVICES, Copy, Fleet, drill_ports, make_copies, sent_twice
from dev.copies import addresses, two_copies
from dev.games_day import services, set_up_demo
from dev.previous_release import PreviousReleaseError, kept_checkout
from omnium_delivery.sinks import ensure_keys
from omnium_devstack import RedisServer
from omnium_devstack.roles import own_logins
from omnium_settings import Settings

PHASES = ("release", "rollback")
TARGETS = (
    "release_acked_lost",
    "rollback_acked_lost",
    "release_api_errors",
    "rollback_api_errors",
    "release_scorer_errors",
    "rollback_scorer_errors",
    "release_copies_failed",
    "rollback_copies_failed",
)


# --- the two versions --------------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    """How one version's copy is started: its environment and the folder it runs in."""

    name: str
    commit: str
    cwd: Path
    env: Mapping[str, str]  # added over the copy's own (PYTHONPATH, a setting's override)
    known: frozenset[str] | None  # the settings it has (None: every one)


def versions(args: argparse.Namespace) -> tuple[Version, Version]:
    folder = args.data_dir.resolve().parent / "releases"
    try:
        checkout = kept_checkout(folder)
    except PreviousReleaseError as exc:
        raise BenchError(f"no previous version to roll from: {exc}") from exc
    say(f"previous version: {checkout.commit[:12]}, {checkout.chosen}")
    extra = {"PYTHONPATH": checkout.pythonpath}
    if args.previous_ahead_allowed is not None:
        extra["OMNIUM_SCHEMA_AHEAD_ALLOWED"] = str(args.previous_ahead_allowed)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    previous = Version("previous", checkout.commit, checkout.root, extra, checkout.settings)
    return previous, Version("this", head, ROOT, {}, None)


def launch(copy: Copy, base_env: Mapping[str, str], version: Version) -> None:
    """The copy set to start from `version` next time (its settings those the version has)."""
    env = {k: v for k, v in base_env.items() if not k.startswith("PYTHONPATH")}
    if version.known is not None:
        env = {k: v for k, v in env.items() if not k.startswith("OMNIUM_") or k in version.known}
    copy.env = env | dict(version.env)
    copy.cwd = version.cwd


# --- the rolls ---------------------------------------------------------------------------------


@dataclass
class Roll:
    """What one phase's roll measured."""

    migration_s: float = float("nan")
    seconds: float = float("nan")
    stops: dict[str, tuple[float, str]] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)


async def stop_copy(fleet: Fleet, copy: Copy, how: str, grace: float) -> tuple[float, str]:
    """SIGTERM as Kubernetes stops a pod (drained), or SIGKILL to its group (not drained)."""
    if how == "TERM":
        return await fleet.terminate(copy, grace)
    began = time.monotonic()
    await fleet.kill9(copy)
    return time.monotonic() - began, "killed without draining"


async def roll(
    args: argparse.Namespace,
    fleet: Fleet,
    base_env: Mapping[str, Mapping[str, str]],
    to: Version,
    phase: str,
    result: Roll,
    timeline: list[tuple[float, str]],
) -> None:
    """Each copy of each service in turn: stopped, started from `to`, waited for until ready;
    a copy that is not ready halts the roll (as a rollout halts), left stopped."""
    for service in DOUBLED:
        for copy in fleet.of(service):
            copy.busy = True
            began = time.monotonic()
            timeline.append((began, f"{phase}: {copy.name}"))
            result.stops[copy.name] = await stop_copy(fleet, copy, args.stop_signal, args.grace)
            launch(copy, base_env[copy.name], to)
            await fleet.start(copy)
            try:
                await fleet.ready(copy, args.ready_wait)
            except BenchError as exc:
                result.failed.append(copy.name)
                say(f"{phase}: {copy.name} not ready: {exc}; the roll halts here")
                if copy.run is not None and copy.run.proc.returncode is None:
                    await fleet.kill9(copy)
                return
            result.ready[copy.name] = time.monotonic() - began
            await asyncio.sleep(args.ready_pause)
            copy.busy = False
            took, how = result.stops[copy.name]
            say(
                f"{phase}: {copy.name} {how} after {took:.1f} s; {to.name} version "
                f"({to.commit[:12]}) ready {result.ready[copy.name]:.1f} s after the stop"
            )


# --- one run -----------------------------------------------------------------------------------


async def one_run(args: argparse.Namespace, run_no: int) -> dict[str, float | str]:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    if shutil.which("haproxy") is None:
        raise BenchError("HAProxy is not installed: run 'make system-ha' (as root)")
    previous, this = versions(args)
    data_dir = args.data_dir.resolve()
    shutil.rmtree(data_dir, ignore_errors=True)
    (data_dir / "logs").mkdir(parents=True)
    load = Load(PHASES)
    async with database(data_dir) as cluster:
        redis = RedisServer(data_dir, 0)
        await asyncio.to_thread(redis.start)
        try:
            return await _with_servers(
                args, run_no, load, cluster.database_url, redis.redis_url, (previous, this)
            )
        finally:
            await asyncio.to_thread(redis.stop)


async def _with_servers(
    args: argparse.Namespace,
    run_no: int,
    load: Load,
    url: str,
    redis_url: str,
    both: tuple[Version, Version],
) -> dict[str, float | str]:
    previous, _ = both
    data_dir = args.data_dir.resolve()
    logs = data_dir / "logs"
    # The previous version's schema, by its own migration step.
    setup_env = child_env({})
    launch_env = {**setup_env, **previous.env}
    await migration_step(url, launch_env, logs, cwd=previous.cwd, name="migrate-previous")
    ports = drill_ports()
    values = {f"OMNIUM_{name.upper()}_PORT": str(port) for name, port in ports.items()}
    values |= {
        "OMNIUM_DATABASE_URL": url,
        "OMNIUM_REDIS_URL": redis_url,
        "OMNIUM_DATABASE_STANDBY_EXPECTED": "true",
        "OMNIUM_GRPC_CALLERS": f"bench:service:{TOKEN}",
        "OMNIUM_GRPC_TOKEN": TOKEN,
        "OMNIUM_GATEWAY_API_KEYS": f"drill:{READER_KEY}:10000:10000",
        # Every scorer here comes from one address: its console bucket is made roomy, since the
        # per-address limits are not what a release rehearses. The refill is far above what
        # every worker can take: the previous release's workers pile slice on slice (fixed
        # since), which at 1,000 a second left a worker refused now and then (a scorer's 429).
        "OMNIUM_GATEWAY_CONSOLE_RATE_PER_SECOND": "100000",
        "OMNIUM_GATEWAY_CONSOLE_BURST": "20000",
        "OMNIUM_LOG_LEVEL": "INFO",
        "OMNIUM_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
    }
    settings = Settings.from_env(values)
    values |= addresses(settings)
    env = child_env(values)
    secret = "drill-scout-secret-" + os.urandom(6).hex()
    (data_dir / "scout-secret").write_text(secret + "\n")
    ensure_keys(data_dir / "sftp-keys")
    (data_dir / "webhook-secret").write_text("whsec_ZHJpbGwtd2ViaG9vay1zZWNyZXQtMDEyMzQ1Njc4OQ==\n")
    sink_settings = settings.replace(webhook_sink_port=free_port())
    specs = [s for s in services(settings, data_dir / "scout-secret") if s.name in SERVICES]
    specs = [
        next(t for t in services(sink_settings, data_dir / "scout-secret") if t.name == s.name)
        if s.name == "client-sinks"
        else s
        for s in specs
    ]
    specs = own_logins(specs, url)
    fleet = Fleet(
        make_copies(two_copies(specs, settings, data_dir), env, args.replay_seconds_per_hour),
        logs,
    )
    # Each copy's own environment, whichever version it runs; the services start as previous.
    base_env = {c.name: dict(c.env) for c in fleet.copies.values()}
    for copy in fleet.copies.values():
        if copy.service in DOUBLED:
            launch(copy, base_env[copy.name], previous)
    hooks = web.AppRunner(receivers_app(load), access_log=None, shutdown_timeout=1)
    await hooks.setup()
    await web.TCPSite(hooks, "127.0.0.1", ports["webhook_sink"]).start()
    try:
        began = time.monotonic()
        for copy in fleet.copies.values():
            await fleet.start(copy)
        for copy in fleet.copies.values():
            await fleet.ready(copy, max(120.0, args.ready_wait))
        fleet.keep()
        say(
            f"services: {', '.join(fleet.copies)} up after {time.monotonic() - began:.0f} s, "
            f"the previous version's ({previous.commit[:12]}) (logs in {logs})"
        )
        await set_up_demo(url, settings, secret, data_dir)
        units = await seed_scorers(url, args.scorers)
        figures = await _load_and_rolls(args, load, fleet, base_env, both, url, settings, units)
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


async def _load_and_rolls(
    args: argparse.Namespace,
    load: Load,
    fleet: Fleet,
    base_env: Mapping[str, Mapping[str, str]],
    both: tuple[Version, Version],
    url: str,
    settings: Any,
    units: list[tuple[str, str]],
) -> dict[str, float | str]:
    previous, this = both
    base = f"http://127.0.0.1:{settings.gateway.port}"  # HAProxy
    scout = f"http://127.0.0.1:{settings.dev.scout_simulator_port}"
    tasks = start_load(load, base, units, args)
    rolls = {name: Roll() for name in PHASES}
    timeline: list[tuple[float, str]] = []
    try:
        load.begin("release")
        await steady(load, args.steady_seconds)
        say(f"steady: {sum(t.saved is not None for t in load.taps)} taps saved")
        run_id, _ = await run_in_flight(url, scout, args.run_wait)
        say(f"release: Scout run in flight: {run_id}")
        release = rolls["release"]
        began = time.monotonic()
        timeline.append((began, "release: the migration step"))
        migrate_env = child_env({})
        release.migration_s = await migration_step(url, migrate_env, fleet.logs)
        say(f"release: this version's migration step took {release.migration_s:.1f} s")
        await roll(args, fleet, base_env, this, "release", release, timeline)
        release.seconds = time.monotonic() - began
        say(f"release: done {release.seconds:.1f} s after the migration step began")
        await asyncio.sleep(args.seconds)

        load.begin("rollback")
        await steady(load, args.steady_seconds / 2)
        run_id, _ = await run_in_flight(url, scout, args.run_wait)
        say(f"rollback: Scout run in flight: {run_id}")
        back = rolls["rollback"]
        began = time.monotonic()
        await roll(args, fleet, base_env, previous, "rollback", back, timeline)
        back.seconds = time.monotonic() - began
        say(f"rollback: done after {back.seconds:.1f} s")
        await asyncio.sleep(args.seconds)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    load.stopping.set()
    say("load stopped; the scorers send what is still queued")
    await asyncio.gather(*tasks, return_exceptions=True)
    return await _settle_and_check(args, load, fleet, rolls, timeline, url)


# --- the checks --------------------------------------------------------------------------------


def attributed(load: Load, timeline: Sequence[tuple[float, str]]) -> list[str]:
    """The answers that were not a success, by the step made last before each."""
    counts: dict[str, dict[str, int]] = {}
    for at, kind, status in load.misses:
        what = "before any step"
        for made, step in timeline:
            if made <= at:
                what = step
        by = counts.setdefault(what, {})
        by[f"{kind} {status}"] = by.get(f"{kind} {status}", 0) + 1
    return [f"not a success after {what}: {n}" for what, n in counts.items()]


async def _settle_and_check(
    args: argparse.Namespace,
    load: Load,
    fleet: Fleet,
    rolls: Mapping[str, Roll],
    timeline: Sequence[tuple[float, str]],
    url: str,
) -> dict[str, float | str]:
    data_dir = args.data_dir.resolve()
    began = time.monotonic()
    missed = await deliveries_settled(url, data_dir / "sftp", load, began, args.settle_seconds)
    taps = await tap_checks(url, load)
    twice = await import_checks(url, load)
    doubled = await sent_twice(url, load, data_dir / "logs" / "client-sinks.log")
    await say_diagnosis(url, load)
    for line in attributed(load, timeline):
        say(line)
    unexpected = [u for c in fleet.copies.values() for u in c.unexpected]
    if unexpected:
        say(f"copies that exited by themselves: {unexpected}")
    figures: dict[str, float | str] = {}
    required: dict[str, float | str] = {}
    for name in PHASES:
        answers = load.answers[name]
        say(f"{name}: public API answers {dict(answers)}")
        say(f"{name}: scorer sync answers (HTTP) {dict(load.syncs[name])}")
        result = rolls[name]
        figures |= {
            f"{name}_taps": taps[name]["taps"],
            f"{name}_taps_saved": taps[name]["taps_saved"],
            f"{name}_tap_p50_ms": taps[name]["tap_p50_ms"],
            f"{name}_tap_p99_ms": taps[name]["tap_p99_ms"],
            f"{name}_scorer_retries": taps[name]["scorer_retries"],
            f"{name}_duplicates": taps[name]["duplicates"],
            f"{name}_import_batches_twice": twice[name],
            f"{name}_delivery_missed": len(missed[name]),
            f"{name}_stop_s": max((s for s, _ in result.stops.values()), default=float("nan")),
            f"{name}_ready_s": max(result.ready.values(), default=float("nan")),
        }
        required |= {
            f"{name}_acked_lost": taps[name]["acked_lost"],
            f"{name}_api_errors": sum(n for s, n in answers.items() if s not in ("200", "304")),
            f"{name}_scorer_errors": sum(n for s, n in load.syncs[name].items() if s != "200"),
            f"{name}_copies_failed": len(result.failed),
        }
    figures |= {
        "delivery_sent_twice": doubled,
        "copies_exited_by_themselves": len(unexpected),
        "release_migration_s": rolls["release"].migration_s,
        "rollback_seconds": rolls["rollback"].seconds,
    }
    return figures | required | {"release_seconds": rolls["release"].seconds}


# --- entry -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drill_release", description=__doc__)
    add_load_options(
        parser, seconds=8.0, seconds_help="load kept going after each phase's roll", steady=10.0
    )
    parser.add_argument(
        "--ready-pause",
        type=float,
        default=2.0,
        help="after a copy is ready, before the next is stopped (HAProxy checks every second)",
    )
    parser.add_argument(
        "--ready-wait", type=float, default=90.0, help="longest wait for a started copy to be ready"
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds a copy has to exit after SIGTERM before it is killed",
    )
    parser.add_argument(
        "--stop-signal",
        choices=("TERM", "KILL"),
        default="TERM",
        help="how a copy is stopped: TERM (drained, as Kubernetes stops a pod) or KILL (no "
        "draining: what HAProxy's retries and the clients' resends must then cover)",
    )
    parser.add_argument(
        "--previous-ahead-allowed",
        type=int,
        default=None,
        help="OMNIUM_SCHEMA_AHEAD_ALLOWED for the previous version (0: it refuses a newer "
        "schema, the protection taken away); unset: its default",
    )
    add_run_options(parser, settle=60.0, seed=20261207, data_dir=ROOT / ".omnium" / "drill-release")
    return parser.parse_args(argv)


def misses(runs: Sequence[Mapping[str, float | str]]) -> list[str]:
    """Each target a run missed, said as `run N: name = value (target 0)`."""
    out = []
    for n, figures in enumerate(runs, start=1):
        for name in TARGETS:
            value = figures.get(name)
            if not isinstance(value, int | float) or value != 0:
                out.append(f"run {n}: {name} = {value} (target 0)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    runs: list[dict[str, float | str]] = []
    try:
        for n in range(1, args.runs + 1):
            say(f"--- run {n} of {args.runs}")
            runs.append(asyncio.run(one_run(args, n)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("drill_release: stopped; everything it started is stopped", flush=True)
        return 130
    except BenchError as exc:
        print(f"drill_release: {exc}", file=sys.stderr, flush=True)
        return 1
    print_figures(runs)
    missed = misses(runs)
    for line in missed:
        print(f"drill_release: missed: {line}", file=sys.stderr, flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
