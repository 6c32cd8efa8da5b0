"""The dev stack's service wiring: `make run`, its HA copies, and the demo's integrations and
clients, which the tests and benchmarks set up the same way. Run with `python -m dev run`."""

from __future__ import annotations
