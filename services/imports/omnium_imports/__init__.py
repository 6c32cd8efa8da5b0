"""The imports service: Scout's doorbell, the import queue and the agreed run."""

from __future__ import annotations

from omnium_imports._app import ImportsApp
from omnium_imports._files import IntegrationSpec, mapping_file
from omnium_imports._inputs import Problem, SetupError
from omnium_imports._queue import Job
from omnium_imports._scout import ScoutClient, ScoutError, ScoutRun
from omnium_imports._setup import (
    add_lookups,
    add_version,
    load_reference,
    register_integration,
    set_state,
)
from omnium_imports._worker import HAND_OVER_SECONDS
from omnium_imports.run import Pipeline, RunResult

__all__ = [
    "HAND_OVER_SECONDS",
    "ImportsApp",
    "IntegrationSpec",
    "Job",
    "Pipeline",
    "Problem",
    "RunResult",
    "ScoutClient",
    "ScoutError",
    "ScoutRun",
    "SetupError",
    "add_lookups",
    "add_version",
    "load_reference",
    "mapping_file",
    "register_integration",
    "set_state",
]
