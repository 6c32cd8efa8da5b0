"""Command line for gRPC callers: `python -m omnium_grpc hash-token` prints the sha256=<hex>
that OMNIUM_GRPC_CALLERS may hold in place of a token (the token is read from standard input,
so it stays out of the shell's history and the process list)."""

from __future__ import annotations

import argparse
import sys

from omnium_grpc._callers import token_hash


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m omnium_grpc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "hash-token",
        help="print sha256=<hex> for the token on the first line of standard input",
    )
    parser.parse_args(argv)
    token = sys.stdin.readline().strip()
    if not token:
        print(
            "hash-token: no token on standard input. Pipe it in, e.g. "
            '`printf %s "$TOKEN" | python -m omnium_grpc hash-token`.',
            file=sys.stderr,
        )
        return 2
    print(token_hash(token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
