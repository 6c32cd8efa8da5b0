"""A Scout simulator: Scout's HTTP API and doorbell, for omnium's demo and tests, not production."""

from __future__ import annotations

from omnium_scout_sim._doorbell import SIGNATURE_HEADER, Delivery, DoorbellTarget, RingAgain, sign
from omnium_scout_sim._faults import MALFORMED_PAGES
from omnium_scout_sim._games import Games
from omnium_scout_sim._replay import Replay, ReplaySettings
from omnium_scout_sim._runs import Run
from omnium_scout_sim._server import ScoutSimulator
from omnium_scout_sim._simulator import DEFAULT_SEED, Limits, SimulatorConfig
from omnium_scout_sim._units import NotFound, SimulatorError

__all__ = [
    "DEFAULT_SEED",
    "MALFORMED_PAGES",
    "SIGNATURE_HEADER",
    "Delivery",
    "DoorbellTarget",
    "Games",
    "Limits",
    "NotFound",
    "Replay",
    "ReplaySettings",
    "RingAgain",
    "Run",
    "ScoutSimulator",
    "SimulatorConfig",
    "SimulatorError",
    "sign",
]
