"""The native library's log records in Python's ``logging``: logger ``ticketing`` and its
children (``ticketing.client.…``, ``ticketing.panic`` for a panic caught inside the
library). The package adds a ``NullHandler`` to ``ticketing``, as a library should, so
nothing is printed until the application configures logging.

Records are forwarded at the ``ticketing`` logger's effective level and above, as it is
when a ``Client`` is made; the library calls back on a thread of its own, never while it
holds a lock of its own (include/ticketing.h, ``ticketing_set_logger``). At interpreter
exit the forwarding stops (an ``atexit`` handler registered at import, so it runs after
the application's own handlers)."""

from __future__ import annotations

import atexit
import logging
from typing import Optional

from . import _native as n

LOGGER = logging.getLogger("ticketing")
LOGGER.addHandler(logging.NullHandler())

#: TICKETING_LOG_ERROR..TRACE as ``logging`` levels (TRACE below DEBUG).
_LEVELS = {1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO, 4: logging.DEBUG, 5: 5}

def _forward(_ctx: Optional[int], level: int, target: bytes, message: bytes) -> None:
    try:
        name = target.decode("utf-8", "replace").replace("::", ".")
        if name != "ticketing" and not name.startswith("ticketing."):
            name = "ticketing." + name
        logging.getLogger(name).log(_LEVELS.get(level, logging.ERROR), "%s", message.decode("utf-8", "replace"))
    except Exception:  # a callback must never raise into the library
        pass


_CALLBACK = n.LOG_FN(_forward)
_native_level: Optional[int] = None


def _native_max_level(level: int) -> int:
    for native, python in ((1, logging.ERROR), (2, logging.WARNING), (3, logging.INFO), (4, logging.DEBUG)):
        if level >= python:
            return native
    return 5


def install() -> None:
    """Forwards the library's records at the ``ticketing`` logger's current effective
    level (called whenever a ``Client`` is made)."""
    global _native_level
    level = _native_max_level(LOGGER.getEffectiveLevel())
    if level != _native_level:
        # TICKETING_CONFIG (a Rust host process with its own logger) leaves it as it is.
        n.blocking.ticketing_set_logger(_CALLBACK, None, level, None)
        _native_level = level


@atexit.register
def _stop() -> None:
    global _native_level
    if _native_level is not None:
        n.blocking.ticketing_set_logger(n.LOG_FN(), None, 0, None)  # NULL: off
        _native_level = None
