"""The command service: the one road every write to match data takes.

Besides the process (`CommandApp`), the road's pure parts: a command or batch parsed as the
service parses it (`parse_command`, `parse_batch`), and the `Planner` that turns it and a read
of the records it names (`ReadState`, with `refs` of that read) into the writes and the answer.
Tools and tests use them to see what the road would do without a database.
"""

from __future__ import annotations

from omnium_command._app import CommandApp
from omnium_command._parse import Refusal, parse_batch, parse_command
from omnium_command._plan import Plan, Planner
from omnium_command._rows import ReadState
from omnium_command._statements import refs

__all__ = [
    "CommandApp",
    "Plan",
    "Planner",
    "ReadState",
    "Refusal",
    "parse_batch",
    "parse_command",
    "refs",
]
