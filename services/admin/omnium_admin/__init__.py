"""The operators' console: sign-in, integrations, runs, Waiting for you and units (aiohttp)."""

from __future__ import annotations

from omnium_admin._app import CLOSE_SECONDS, AdminApp

__all__ = ["CLOSE_SECONDS", "AdminApp"]
