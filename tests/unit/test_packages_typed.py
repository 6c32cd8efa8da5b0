"""Every package of ours says it is typed (PEP 561's py.typed), so another team's mypy reads our
annotations when it imports them, and a new package cannot forget it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_has_py_typed() -> None:
    packages = [
        init.parent
        for pattern in ("libs/omnium_*/__init__.py", "services/*/omnium_*/__init__.py")
        for init in ROOT.glob(pattern)
    ]
    assert len(packages) >= 19
    missing = [str(p.relative_to(ROOT)) for p in packages if not (p / "py.typed").is_file()]
    assert missing == [], f"add an empty py.typed to: {', '.join(missing)}"
