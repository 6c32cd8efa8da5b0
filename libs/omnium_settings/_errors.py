"""The one error a setting raises."""

from __future__ import annotations


class SettingsError(ValueError):
    """A setting is missing, misspelt or has a value of the wrong kind."""
