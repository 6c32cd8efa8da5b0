"""Start the Scout simulator: `python -m omnium_scout_sim --port 8090 --replay`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from omnium_scout_sim import (
    DEFAULT_SEED,
    DoorbellTarget,
    ReplaySettings,
    ScoutSimulator,
    SimulatorConfig,
)
from omnium_settings import Settings, SettingsError

_DEFAULT_CODES = {"schedule": "scout-schedule", "medals": "scout-medals"}


def _parser(settings: Settings) -> argparse.ArgumentParser:
    defaults = ReplaySettings()
    p = argparse.ArgumentParser(
        prog="python -m omnium_scout_sim",
        description="A Scout simulator for omnium's demo and tests (not part of production).",
    )
    p.add_argument("--host", default=settings.server.bind_host, help="address to listen on")
    p.add_argument(
        "--port", type=int, default=settings.dev.scout_simulator_port, help="0: any free"
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the Games' seed")
    p.add_argument("--schedule-job", default="schedule", help="id of the unit rows' job")
    p.add_argument("--medals-job", default="medals", help="id of the medal table's job")
    p.add_argument("--doorbell-url", help="omnium's doorbell base, e.g. http://127.0.0.1:8081")
    p.add_argument("--secret", help="the integrations' shared secret for signing doorbells")
    p.add_argument("--secret-file", type=Path, help="read the secret from this file instead")
    p.add_argument(
        "--integration",
        action="append",
        default=[],
        metavar="JOB=CODE",
        help="ring /doorbell/CODE for runs of JOB (repeat per job; default: "
        + ", ".join(f"{job}={code}" for job, code in _DEFAULT_CODES.items())
        + ")",
    )
    p.add_argument("--replay", action="store_true", help="play the Games on a fast clock")
    p.add_argument(
        "--replay-seconds-per-hour",
        type=float,
        default=defaults.seconds_per_hour,
        help="real seconds per simulated hour",
    )
    p.add_argument(
        "--replay-run-every",
        type=float,
        default=defaults.schedule_every_seconds,
        help="real seconds between schedule runs",
    )
    p.add_argument(
        "--replay-start",
        type=datetime.fromisoformat,
        default=defaults.start_local,
        help="local time the replay starts from, e.g. 2026-09-25T08:00",
    )
    p.add_argument(
        "--replay-state",
        type=Path,
        help="keep the replay clock in this file, and go on from it when started again",
    )
    p.add_argument("--log-level", default=settings.server.log_level)
    return p


def _config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> SimulatorConfig:
    jobs = {"schedule": args.schedule_job, "medals": args.medals_job}
    doorbells: dict[str, DoorbellTarget] = {}
    if args.doorbell_url:
        secret = args.secret
        if args.secret_file is not None:
            secret = args.secret_file.read_text().strip()
        if not secret:
            parser.error("--doorbell-url needs --secret or --secret-file to sign the doorbells")
        codes = {jobs[job]: code for job, code in _DEFAULT_CODES.items()}
        if args.integration:
            codes = {}
            for pair in args.integration:
                job, sep, code = pair.partition("=")
                if not sep or not job or not code:
                    parser.error(f"--integration wants JOB=CODE, not {pair!r}")
                if job not in jobs.values():
                    parser.error(
                        f"--integration names job {job!r}; jobs are {sorted(jobs.values())}"
                    )
                codes[job] = code
        doorbells = {
            job: DoorbellTarget(args.doorbell_url, code, secret) for job, code in codes.items()
        }
    return SimulatorConfig(
        seed=args.seed,
        schedule_job=args.schedule_job,
        medals_job=args.medals_job,
        doorbells=doorbells,
    )


async def _until_stopped() -> None:
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    try:
        await stopped.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def main(
    config: SimulatorConfig, host: str, port: int, replay: ReplaySettings | None
) -> None:
    sim = ScoutSimulator(config)
    try:
        bound = await sim.start(host, port)
        if replay is not None:
            sim.start_replay(replay)
        rings = ", ".join(f"{job} -> {t.endpoint}" for job, t in config.doorbells.items()) or "none"
        print(
            f"scout-sim listening on http://{host}:{bound} "
            f"(seed {config.seed}, {len(sim.games.units)} units, doorbells: {rings}"
            f"{', replay on' if replay else ''})",
            flush=True,
        )
        await _until_stopped()
    finally:
        await sim.stop()


def run(argv: Sequence[str] | None = None) -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"scout-sim: {exc}", file=sys.stderr)
        return 2
    parser = _parser(settings)
    args = parser.parse_args(argv)
    config = _config(args, parser)
    replay = None
    if args.replay:
        replay = ReplaySettings(
            seconds_per_hour=args.replay_seconds_per_hour,
            schedule_every_seconds=args.replay_run_every,
            start_local=args.replay_start,
            state_file=args.replay_state,
        )
        try:
            replay.check()
        except ValueError as exc:
            parser.error(str(exc))
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(main(config, args.host, args.port, replay))
    return 0


if __name__ == "__main__":
    sys.exit(run())
