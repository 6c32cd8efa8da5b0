"""The import run as stages that hand on values: fetch, record, map, fast path, guards,
batches, send, settle, held rows, missing, close (_stages.py), over one `Context` of the
process's resources (_context.py), which imports no stage; the dry run goes through the same
stages in a context that writes nothing (_dry.py)."""

from __future__ import annotations

from omnium_imports.run._context import Context, HandedOver, RunResult, StageError
from omnium_imports.run._pipeline import Pipeline
from omnium_imports.run._stages import run_stages

__all__ = ["Context", "HandedOver", "Pipeline", "RunResult", "StageError", "run_stages"]
