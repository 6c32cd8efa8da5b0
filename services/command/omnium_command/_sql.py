"""The command service's SQL, loaded once from sql/*.sql."""

from __future__ import annotations

from pathlib import Path

from omnium_db import Queries

QUERIES = Queries.load(Path(__file__).with_name("sql"))
