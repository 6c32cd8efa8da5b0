"""`make run`: python -m dev run [--ha], the dev stack's servers with every service on top."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dev.games_day import run_games_day
from omnium_devstack.__main__ import (
    DEFAULT_DATA_DIR,
    DEFAULT_PG_PORT,
    DEFAULT_REDIS_PORT,
    exit_code,
    log_to_stderr,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dev",
        description="omnium's dev stack with every service and the demo (make run).",
    )
    parser.add_argument(
        "command",
        choices=["run"],
        help="run: both servers, the schema and every service (make run)",
    )
    parser.add_argument(
        "--ha",
        action="store_true",
        help="the HA profile (etcd, two PostgreSQL nodes under Patroni, a synchronous standby) "
        "instead of one PostgreSQL",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="folder for the servers' data (default: %(default)s)",
    )
    parser.add_argument(
        "--pg-port",
        type=int,
        default=DEFAULT_PG_PORT,
        help="PostgreSQL port, 0 for any free one (default: %(default)s)",
    )
    parser.add_argument(
        "--redis-port",
        type=int,
        default=DEFAULT_REDIS_PORT,
        help="Redis port, 0 for any free one (default: %(default)s)",
    )
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    log_to_stderr()
    if args.ha:
        return run_games_day(args.data_dir / "ha", args.pg_port, args.redis_port, ha=True)
    return run_games_day(args.data_dir, args.pg_port, args.redis_port)


def main(argv: Sequence[str] | None = None) -> int:
    return exit_code(lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
