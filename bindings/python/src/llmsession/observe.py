"""The observer hook (docs/observe.md): what the library did on its own (a torn log tail cut,
an open turn repaired, a writer refused, an automatic compaction that failed or could not run,
a request sent over the threshold, ...), reported to a Python callable or to :mod:`logging`.

The observer is process-wide and silent by default. ``set_observer(fn, level)`` passes every
observation at ``level`` or above to ``fn`` as a dict ``{"kind", "level", "message",
"sessionId"?, ...fields}``; ``log_to(logger)`` sends them to a :class:`logging.Logger` (named
``llmsession`` by default), with the dict in ``record.llmsession``. ``observing(...)`` is a
context manager that restores the previous state.

The callable runs synchronously on the thread of the library call that caused the observation
(any thread, possibly several at once), never while a session is locked. It must not call into
llmsession and should return quickly; an exception it raises is logged on the ``llmsession``
logger (``logging.exception``) and dropped, never passed into the library.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
from ctypes import c_void_p, string_at
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from . import _native
from ._runtime import call

#: An observation: ``{"kind", "level", "message", "sessionId"?, ...fields}`` (docs/observe.md).
Observation = Dict[str, Any]
Observer = Callable[[Observation], None]

#: The library's levels (``LLS_LEVEL_*``) by name.
LEVELS: Dict[str, int] = {"debug": 0, "info": 1, "warn": 2, "error": 3}
_TO_LOGGING = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}

# The observers the library may still call, by the userdata id it was given: an entry goes when
# the library frees that userdata (after its last call), not when the observer is replaced, so a
# call running on another thread never finds its callable gone.
_live: Dict[int, Observer] = {}
_ids = itertools.count(1)
_lock = threading.Lock()
# What set_observer last installed (for observing() to restore).
_current: Tuple[Optional[Observer], str] = (None, "info")


def _trampoline(ud: Optional[int], level: int, ptr: Optional[int], n: int) -> None:
    try:
        fn = _live.get(ud or 0)
        if fn is not None and ptr:
            fn(json.loads(string_at(ptr, n)))
    except BaseException:  # nothing may unwind into the library
        try:
            logging.getLogger("llmsession").exception("llmsession: the observer raised")
        except BaseException:
            pass


def _free(ud: Optional[int]) -> None:
    with _lock:
        _live.pop(ud or 0, None)


# Module-lifetime ctypes callbacks: the library may call them from any thread at any time.
_TRAMPOLINE = _native.OBSERVER_FN(_trampoline)
_FREE = _native.FREE_FN(_free)
# NULL function pointers (clearing the observer).
_NO_OBSERVER = _native.OBSERVER_FN()
_NO_FREE = _native.FREE_FN()


def set_observer(fn: Optional[Observer], level: str = "info") -> None:
    """Passes every observation at ``level`` (``"debug"``, ``"info"``, ``"warn"``, ``"error"``) or
    above to ``fn``; ``None`` clears the observer (the library reports nothing). Replaces the
    observer set before. Raises ``ValueError`` for an unknown level (the observer stays)."""
    global _current
    if level not in LEVELS:
        raise ValueError(f"llmsession: unknown observer level {level!r} (expected one of {', '.join(LEVELS)})")
    if fn is None:
        call(_native.lib.lls_set_observer, _NO_OBSERVER, None, _NO_FREE, LEVELS[level])
    else:
        with _lock:
            ud = next(_ids)
            _live[ud] = fn
        # The library owns ud from here on and frees it through _FREE, also when the call fails.
        call(_native.lib.lls_set_observer, _TRAMPOLINE, c_void_p(ud), _FREE, LEVELS[level])
    _current = (fn, level)


def _logging_level_name(logger: logging.Logger) -> str:
    eff = logger.getEffectiveLevel()
    for name, n in sorted(LEVELS.items(), key=lambda kv: kv[1]):
        if _TO_LOGGING[n] >= eff:
            return name
    return "error"


def log_to(logger: Optional[logging.Logger] = None) -> logging.Logger:
    """Sends observations to ``logger`` (default: the ``llmsession`` logger) as log records:
    ``debug``/``info``/``warn``/``error`` become ``DEBUG``/``INFO``/``WARNING``/``ERROR``, the
    message is the observation's, and the whole observation is ``record.llmsession``. The
    library's minimum level is taken from the logger's effective level now, so nothing below it
    is even built; call again after changing the logger's level. Returns the logger."""
    log = logger if logger is not None else logging.getLogger("llmsession")

    def emit(o: Observation) -> None:
        level = _TO_LOGGING.get(LEVELS.get(str(o.get("level")), 1), logging.INFO)
        log.log(level, "%s", o.get("message", ""), extra={"llmsession": o})

    set_observer(emit, _logging_level_name(log))
    return log


@contextlib.contextmanager
def observing(fn: Optional[Observer], level: str = "info") -> Iterator[None]:
    """``set_observer(fn, level)`` for the ``with`` block, then the observer set before it."""
    before = _current
    set_observer(fn, level)
    try:
        yield
    finally:
        set_observer(*before)


def live_observer_count() -> int:
    """Observers the library may still call (0 once none is set and the last call ended)."""
    with _lock:
        return len(_live)
