"""Named queries and migration files are found and well formed."""

from __future__ import annotations

from pathlib import Path

import pytest

from omnium_command._road import QUERIES
from omnium_db import Queries
from omnium_db._migrations import MigrationError, load_migrations


def test_the_road_has_its_statements() -> None:
    for name in ("read", "lock", "write", "timeline_for_subject", "timeline_for_event"):
        assert name in QUERIES
        assert not QUERIES[name].rstrip().endswith(";")


def test_a_query_defined_twice_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text("-- name: one\nSELECT 1;\n-- name: one\nSELECT 2;\n")
    with pytest.raises(ValueError, match="defined twice"):
        Queries.load(tmp_path)


def test_an_unknown_query_names_the_header_to_add(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="-- name: nope"):
        Queries.load(tmp_path)["nope"]


def test_migrations_are_numbered_without_gaps(tmp_path: Path) -> None:
    assert [m.version for m in load_migrations()][:2] == [1, 2]
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0003_c.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="without gaps"):
        load_migrations(tmp_path)
    (tmp_path / "notes.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"NNNN_what_it_does\.sql"):
        load_migrations(tmp_path)
