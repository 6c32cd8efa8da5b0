"""Start the public API gateway: `python -m omnium_gateway` (gateway_workers processes)."""

from __future__ import annotations

import sys

from omnium_gateway._limits import parse_api_keys
from omnium_gateway._route_sets import default_route_sets
from omnium_gateway._server import serve
from omnium_process import load_settings
from omnium_settings import SettingsError
from omnium_telemetry import setup_logging


def main() -> None:
    settings = load_settings("gateway")
    try:
        parse_api_keys(settings)
    except SettingsError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        sys.exit(2)
    setup_logging("gateway", settings)
    serve(settings, route_sets=default_route_sets(settings))


if __name__ == "__main__":
    main()
