"""`python -m omnium_process check --deploy`: what production would refuse, for this environment.

Prints one line per problem and exits 1 when there is any, 0 with "no problems" otherwise; the
same list every process prints when it refuses to start with OMNIUM_ENVIRONMENT=production.
"""

from __future__ import annotations

import argparse
import sys

from omnium_settings import Settings, SettingsError, deploy_problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m omnium_process",
        description="Checks an omnium process's environment before it runs.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="check this environment's settings")
    check.add_argument(
        "--deploy",
        action="store_true",
        required=True,
        help="list every dev default still in force, as production would refuse it",
    )
    parser.parse_args(argv)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"check --deploy: {exc}")
        return 1
    problems = deploy_problems(settings)
    for problem in problems:
        print(f"problem: {problem}")
    print(
        f"check --deploy: {len(problems)} problem(s)" if problems else "check --deploy: no problems"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
