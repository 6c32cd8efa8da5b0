"""`make run`: python -m dev run [--ha], the dev stack's servers with every service on top."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dev.games_day import run_games_day
from dev.image import run_image
from omnium_devstack.__main__ import add_server_options, exit_code, log_to_stderr


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dev",
        description="omnium's dev stack with every service and the demo (make run).",
    )
    parser.add_argument(
        "command",
        choices=["run", "run-image"],
        help="run: both servers, the schema and every service (make run); run-image: every "
        "service from the image, a container each (make run-image)",
    )
    parser.add_argument(
        "--ha",
        action="store_true",
        help="the HA profile (etcd, two PostgreSQL nodes under Patroni, a synchronous standby) "
        "instead of one PostgreSQL",
    )
    add_server_options(parser)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    log_to_stderr()
    if args.command == "run-image":
        return run_image(args.data_dir, args.pg_port, args.redis_port)
    if args.ha:
        return run_games_day(args.data_dir / "ha", args.pg_port, args.redis_port, ha=True)
    return run_games_day(args.data_dir, args.pg_port, args.redis_port)


def main(argv: Sequence[str] | None = None) -> int:
    return exit_code(lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
