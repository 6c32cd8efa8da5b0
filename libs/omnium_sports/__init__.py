"""Sports defined by settings files: the rules a scorer's actions are checked and applied by."""

from __future__ import annotations

from pathlib import Path

from omnium_sports._expr import RuleError
from omnium_sports._load import load_sport, load_sport_text, load_sports, sport_for_discipline
from omnium_sports._sport import (
    UNDO,
    ActionRefused,
    ActionRule,
    FieldRule,
    Sport,
    SportFileError,
)

# The sport files shipped with omnium (the repository's sports/ folder).
SPORTS_DIR = Path(__file__).resolve().parents[2] / "sports"

__all__ = [
    "SPORTS_DIR",
    "UNDO",
    "ActionRefused",
    "ActionRule",
    "FieldRule",
    "RuleError",
    "Sport",
    "SportFileError",
    "load_sport",
    "load_sport_text",
    "load_sports",
    "sport_for_discipline",
]
