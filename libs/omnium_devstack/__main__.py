"""Command line for the dev stack: python -m omnium_devstack {ensure,up,down,status,env}."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from omnium_devstack.binaries import MissingBinaries, ensure_binaries
from omnium_devstack.server import PortInUse, StackError
from omnium_devstack.stack import Stack

DEFAULT_DATA_DIR = Path(".omnium/dev")
DEFAULT_PG_PORT = 55432
DEFAULT_REDIS_PORT = 56379


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """Where the dev stack's servers keep their data and listen (here and in python -m dev)."""
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m omnium_devstack",
        description="Private PostgreSQL and Redis for omnium development.",
    )
    parser.add_argument(
        "command",
        choices=["ensure", "up", "down", "status", "env"],
        help="ensure: install/find binaries; up: start both; down: stop both; "
        "status: what runs where; env: print the env file written by `up` "
        "(every service on top of them: python -m dev run, which is make run)",
    )
    parser.add_argument(
        "--tools",
        action="store_true",
        help="ensure: also the peers tests and benchmarks drive (chromium, WebKitGTK under Xvfb, "
        "sshd, wrk, Varnish, nginx with nchan) and the image's (podman, runc, mmdebstrap, kubectl)",
    )
    parser.add_argument(
        "--image",
        action="store_true",
        help="ensure: also podman, runc, uidmap, mmdebstrap and kubectl, for make image",
    )
    parser.add_argument(
        "--ha",
        action="store_true",
        help="ensure: also Patroni and etcd, for the HA profile (python -m dev run --ha)",
    )
    add_server_options(parser)
    parser.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="PostgreSQL fsync (default: on); --no-fsync is faster and loses data on a crash",
    )
    return parser


def _stack(args: argparse.Namespace) -> Stack:
    return Stack.from_command_line(args.data_dir, args.pg_port, args.redis_port, args.fsync)


def _write_env(stack: Stack) -> str:
    text = "".join(f"{key}={value}\n" for key, value in stack.env().items())
    stack.env_file.write_text(text)
    return text


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    log_to_stderr()
    stack = _stack(args)
    if args.command == "ensure":
        binaries = ensure_binaries(install=True, tools=args.tools, ha=args.ha, image=args.image)
        print(f"postgres: {binaries.postgres.bindir}")
        print(f"redis-server: {binaries.redis_server}")
        return 0
    if args.command == "up":
        stack.start()
        # The release's migration step, as `make run` and the Kubernetes Job run it: a service
        # started alone on this stack then finds its schema (services never migrate).
        env = {**os.environ, **stack.env()}
        # Its lines go to stderr: stdout is the env file's text, for a shell to read.
        migrated = subprocess.run(
            [sys.executable, "-m", "omnium_db", "migrate"], env=env, stdout=sys.stderr, check=False
        )
        sys.stdout.write(_write_env(stack))
        return migrated.returncode
    if args.command == "down":
        stack.stop()
        stack.env_file.unlink(missing_ok=True)
        return 0
    if args.command == "status":
        print("\n".join(stack.describe()))
        running = stack.postgres.running() is not None and stack.redis.running() is not None
        return 0 if running else 1
    # env
    try:
        sys.stdout.write(stack.env_file.read_text())
    except FileNotFoundError:
        print(
            f"no {stack.env_file}: start the stack with `python -m omnium_devstack up` first",
            file=sys.stderr,
        )
        return 1
    return 0


def log_to_stderr() -> None:
    """The dev stack's own lines on stderr, prefixed; httpx's only when something goes wrong."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.basicConfig(
        level=logging.INFO, format="omnium-devstack: %(message)s", stream=sys.stderr
    )


def main(argv: Sequence[str] | None = None) -> int:
    return exit_code(lambda: run(argv))


def exit_code(command: Callable[[], int]) -> int:
    """What a dev stack command returns: its own code, or one for the error it explains."""
    try:
        return command()
    except (MissingBinaries, PortInUse) as exc:
        print(exc, file=sys.stderr)
        return 2
    except StackError as exc:
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
