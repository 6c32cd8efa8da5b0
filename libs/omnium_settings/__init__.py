"""Typed settings for every omnium process, read once from OMNIUM_* variables over defaults."""

from __future__ import annotations

from omnium_settings._errors import SettingsError
from omnium_settings._reference import settings_markdown
from omnium_settings._settings import Settings, describe_settings

__all__ = ["Settings", "SettingsError", "describe_settings", "settings_markdown"]
