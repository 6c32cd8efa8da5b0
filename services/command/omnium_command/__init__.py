"""The command service: the one road every write to match data takes."""

from __future__ import annotations

from omnium_command._app import CommandApp

__all__ = ["CommandApp"]
