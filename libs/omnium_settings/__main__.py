"""`python -m omnium_settings --markdown`: print the settings reference (docs/settings.md)."""

from __future__ import annotations

import argparse

from omnium_settings._reference import settings_markdown


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m omnium_settings",
        description="Every OMNIUM_* setting with its default and what it does.",
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print docs/settings.md (make docs writes it)",
    )
    parser.parse_args()
    print(settings_markdown(), end="")


if __name__ == "__main__":
    main()
