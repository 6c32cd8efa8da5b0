"""Name where an unclosed asyncio stream was opened.

The suite shares one event loop, and a `StreamWriter` dropped without `close()` sits in a
reference cycle until the garbage collector next runs: its `ResourceWarning` then fails whatever
test is running, which is rarely the one that leaked it. Python names the origin only under
tracemalloc, which slows the whole suite several times over. This records, for each writer made
(a few hundred in a run), the stack that made it, and puts it in the warning.
"""

from __future__ import annotations

import asyncio
import traceback
import warnings
from typing import Any

_ORIGIN = "_omnium_opened_at"


def name_stream_origins() -> None:
    """Patch `asyncio.StreamWriter` (this process only); calling it again does nothing."""
    cls: Any = asyncio.StreamWriter
    if getattr(cls, "_omnium_names_origins", False):
        return
    init = cls.__init__
    stdlib_del = cls.__del__

    def __init__(self: asyncio.StreamWriter, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        setattr(self, _ORIGIN, "".join(traceback.format_stack(limit=14)[:-1]))

    def __del__(self: Any) -> None:
        # As the standard library's, with the stack that opened the stream in the message.
        if not self._transport.is_closing() and not self._loop.is_closed():
            self.close()
            opened = getattr(self, _ORIGIN, "(not recorded)\n")
            message = f"unclosed {self!r}, opened at:\n{opened}"
            warnings.warn(message, ResourceWarning, stacklevel=1)
            return
        stdlib_del(self)

    cls.__init__ = __init__
    cls.__del__ = __del__
    cls._omnium_names_origins = True
