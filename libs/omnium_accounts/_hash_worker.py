"""A password-check process: one JSON request a line on stdin, one answer a line on stdout.

Run by path (`python _hash_worker.py`), so it loads `_passwords.py` beside it and nothing else of
omnium: a small process that only hashes. It runs under Linux's SCHED_IDLE (nice 19 where that
is refused), so a hash takes only CPU time nothing else on the machine wants. Being a process of
its own, not a thread, it shares no interpreter lock with the server: a starved hash can never
hold up the event loop that answers scorers (a low-priority thread that held the lock when the
machine got busy stalled every request of its server until it ran again).

Requests are `["verify", [password, stored]]` or `["hash", [password]]`; answers are
`{"ok": result}` or `{"error": "..."}`. It ends when its stdin closes (its server is gone).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any


def _lowest_priority() -> None:
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _passwords() -> Any:
    spec = importlib.util.spec_from_file_location(
        "omnium_password_checks", Path(__file__).with_name("_passwords.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    _lowest_priority()
    passwords = _passwords()
    ops = {"verify": passwords.verify_password, "hash": passwords.hash_password}
    for line in sys.stdin:
        try:
            op, args = json.loads(line)
            answer: dict[str, Any] = {"ok": ops[op](*args)}
        except Exception as exc:  # told to the server, which answers the person
            answer = {"error": type(exc).__name__}  # never its text: it may quote a password
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
