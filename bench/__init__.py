"""Benchmarks that print figures: run each with `python -m bench.<name>`."""

from __future__ import annotations
