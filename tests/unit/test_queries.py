"""Named queries and migration files are found and well formed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from omnium_command._sql import QUERIES
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


def test_a_statement_is_sent_without_the_comments_that_open_it(tmp_path: Path) -> None:
    # Its trace span is named by its first word: "SELECT", not "--".
    (tmp_path / "a.sql").write_text(
        "-- name: one\n-- Why it reads this.\n  -- And more.\nSELECT 1 -- kept\nFROM t;\n"
        "-- name: two\n-- Its parts.\n-- part: p\nSELECT 2\n-- end part\n"
    )
    queries = Queries.load(tmp_path)
    assert queries["one"] == "SELECT 1 -- kept\nFROM t"
    assert queries.parts("two") == {"p"}
    assert queries.compose("two", {"p"}).text.strip() == "SELECT 2"


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


def _parted(tmp_path: Path) -> Queries:
    (tmp_path / "w.sql").write_text(
        "-- name: write\n"
        "WITH\n"
        "-- $2 in a comment is no parameter\n"
        "-- part: a\n"
        "a AS (SELECT $1::int AS x),\n"
        "-- end part\n"
        "-- part: b\n"
        "b AS (SELECT $2::int AS y),\n"
        "-- end part\n"
        "c AS (SELECT $3::int AS z)\n"
        "SELECT (SELECT z FROM c)\n"
        "-- part: b\n"
        "  , (SELECT y FROM b)\n"
        "-- end part\n"
        ";\n"
    )
    return Queries.load(tmp_path)


def test_a_statement_is_composed_of_the_parts_asked_for(tmp_path: Path) -> None:
    queries = _parted(tmp_path)
    assert queries.parts("write") == {"a", "b"}
    whole = queries.compose("write", {"a", "b"})
    assert whole.params == (1, 2, 3)
    only_b = queries.compose("write", {"b"})
    assert "a AS" not in only_b.text and "(SELECT y FROM b)" in only_b.text
    # The parameters are numbered again from $1 and the arguments picked to match.
    assert only_b.params == (2, 3)
    assert "$1::int AS y" in only_b.text and "$2::int AS z" in only_b.text
    assert only_b.args(["a", "b", "c"]) == ["b", "c"]
    bare = queries.compose("write", [])
    assert "(SELECT y FROM b)" not in bare.text and bare.params == (3,)
    assert queries.compose("write", ["b"]) is only_b  # made once


def test_an_unknown_part_or_an_open_one_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="no part nope"):
        _parted(tmp_path).compose("write", {"nope"})
    (tmp_path / "w.sql").write_text("-- name: w\n-- part: a\nSELECT 1\n")
    with pytest.raises(ValueError, match="no '-- end part'"):
        Queries.load(tmp_path)


@pytest.mark.parametrize("name", ["read", "write"])
def test_every_part_of_the_road_s_statements_stands_alone(name: str) -> None:
    # Each part only with what is always there: no part leans on another optional one.
    assert QUERIES.parts(name)
    for part in QUERIES.parts(name):
        composed = QUERIES.compose(name, {part})
        assert composed.text.count("(") == composed.text.count(")")
        assert composed.params == tuple(sorted(composed.params))


def _named(tmp_path: Path, body: str) -> Queries:
    (tmp_path / "n.sql").write_text(f"-- name: q\n{body}\n")
    return Queries.load(tmp_path)


def test_named_parameters_become_numbered_once_at_load(tmp_path: Path) -> None:
    queries = _named(
        tmp_path,
        "SELECT :b::int, :a, :b::text[], x[1:2], y[lo:hi], ':c', \"d:e\"\n"
        "  -- :f in a comment is no parameter\n"
        "  /* nor :g here */ FROM t WHERE s = E'\\':h' AND $$ :i $$ = $q$ :j $q$",
    )
    # Numbered in the order the names first appear; a repeated name is the same argument.
    assert queries["q"].startswith("SELECT $1::int, $2, $1::text[], x[1:2], y[lo:hi], ':c'")
    assert queries.names_of("q") == ("b", "a")
    for untouched in (":f", ":g", "':h'", "$$ :i $$", "$q$ :j $q$", '"d:e"'):
        assert untouched in queries["q"]
    statement = queries.statement("q")
    assert statement.params == (1, 2)
    assert statement.args({"a": "A", "b": "B"}) == ["B", "A"]


def test_a_named_statement_is_composed_and_picks_its_arguments_by_name(tmp_path: Path) -> None:
    queries = _named(
        tmp_path,
        "WITH\n"
        "-- part: a\n"
        "a AS (SELECT :first::int AS x),\n"
        "-- end part\n"
        "c AS (SELECT :last::int AS z, :last AS again),\n"
        "-- part: b\n"
        "b AS (SELECT :middle::int AS y)\n"
        "-- end part\n"
        "SELECT (SELECT z FROM c)",
    )
    whole = queries.statement("q")
    assert whole.names == ("first", "last", "middle") and whole.params == (1, 2, 3)
    only_b = queries.compose("q", ["b"])
    assert "\na AS" not in only_b.text
    assert "$1::int AS z, $1 AS again" in only_b.text and "$2::int AS y" in only_b.text
    assert only_b.names == ("last", "middle") and only_b.params == (2, 3)
    assert only_b.args({"middle": "M", "last": "L"}) == ["L", "M"]
    bare = queries.compose("q", [])
    assert bare.names == ("last",) and "$2" not in bare.text
    # Every name of the whole statement may be passed, whichever parts are kept.
    assert bare.args({"first": 1, "last": 2, "middle": 3}) == [2]


def test_named_arguments_must_match_the_statement(tmp_path: Path) -> None:
    statement = _named(tmp_path, "SELECT :one, :two").statement("q")
    with pytest.raises(KeyError, match="missing :two"):
        statement.args({"one": 1})
    with pytest.raises(KeyError, match="no such name :tow"):
        statement.args({"one": 1, "two": 2, "tow": 2})
    with pytest.raises(TypeError, match="by name"):
        statement.args([1, 2])


def test_a_statement_without_names_keeps_its_positions(tmp_path: Path) -> None:
    queries = _named(tmp_path, "SELECT $2::int, $1, ':x', a := 1")
    assert queries["q"] == "SELECT $2::int, $1, ':x', a := 1"
    assert queries.names_of("q") == ()
    assert queries.statement("q").args(["one", "two"]) == ["one", "two"]
    with pytest.raises(TypeError, match="by position"):
        queries.statement("q").args({"one": 1})


def test_names_and_numbers_in_one_statement_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mixes named parameters"):
        _named(tmp_path, "SELECT :one, $2")


def test_every_package_s_queries_load() -> None:
    # Each service's statements and each library's.
    root = Path(__file__).resolve().parents[2]
    folders = sorted([*root.glob("services/*/*/sql"), *root.glob("libs/*/sql")])
    assert len(folders) >= 7
    for folder in folders:
        assert Queries.load(folder).names(), folder
    # Nothing of a package's SQL lies beside its code, outside sql/.
    assert not [p for p in [*root.glob("services/*/*/*.sql"), *root.glob("libs/*/*.sql")]]


def test_no_statement_lines_up_more_than_nine_positions() -> None:
    # Past $9 a reader counts; such a statement takes its arguments by name.
    root = Path(__file__).resolve().parents[2]
    for path in sorted([*root.glob("services/*/*/sql/*.sql"), *root.glob("libs/*/sql/*.sql")]):
        assert not re.search(r"\$[1-9]\d", path.read_text()), path


def test_bind_gives_the_text_and_the_arguments_in_order(tmp_path: Path) -> None:
    (tmp_path / "q.sql").write_text(
        "-- name: pick\nSELECT * FROM t WHERE b = :b AND a = :a AND name = :name AND b <> 0;\n"
    )
    queries = Queries.load(tmp_path)
    text, *args = queries.bind("pick", a=1, b=2, name="x")
    assert text == "SELECT * FROM t WHERE b = $1 AND a = $2 AND name = $3 AND b <> 0"
    assert args == [2, 1, "x"]
    with pytest.raises(KeyError, match="missing :name"):
        queries.bind("pick", a=1, b=2)


def test_a_statement_of_three_or_more_arguments_names_them() -> None:
    root = Path(__file__).resolve().parents[2]
    numbered = []
    for folder in sorted([*root.glob("services/*/*/sql"), *root.glob("libs/*/sql")]):
        where = str(folder.relative_to(root))
        queries = Queries.load(folder)
        for name in queries.names():
            statement = queries.statement(name)
            if not queries.names_of(name) and len(statement.params) >= 3:
                numbered.append(f"{name} ({where})")
    assert numbered == [], f"write these with :names: {', '.join(numbered)}"


def test_no_statement_written_with_names_is_called_by_position() -> None:
    # `QUERIES["x"]` is the text alone: passed with arguments in a row, a statement written with
    # names would take them in the order its names first appear, not the caller's.
    root = Path(__file__).resolve().parents[2]
    by_position = []
    for folder in sorted([*root.glob("services/*/*/sql"), *root.glob("libs/*/sql")]):
        queries = Queries.load(folder)
        for path in sorted(folder.parent.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Subscript)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "QUERIES"
                    and isinstance(node.slice, ast.Constant)
                    and node.slice.value in queries
                    and queries.names_of(node.slice.value)
                ):
                    by_position.append(f"{node.slice.value} ({path.relative_to(root)})")
    assert by_position == [], f"call these with QUERIES.bind: {', '.join(by_position)}"


def test_delivery_s_loops_call_its_stores() -> None:
    # _app.py keeps the loops; the outbox's and sending's SQL calls are in their stores.
    app = Path(__file__).resolve().parents[2] / "services/delivery/omnium_delivery/_app.py"
    calls = re.findall(r"QUERIES|\.fetch\w*\(|\.execute\(", app.read_text())
    assert calls == [], f"_app.py calls the database itself: {calls}"
