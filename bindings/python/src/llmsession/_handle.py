"""The base of every object that owns a library handle: ``close()``, ``with``, a GC safety net."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional, TypeVar

from .errors import closed_error

H = TypeVar("H", bound="Handle")


class Handle:
    """Owns one library handle. ``close()`` frees it (idempotent); ``with obj:`` closes it at the
    end of the block; an object the garbage collector reclaims unclosed is freed then. A method
    of a closed object raises :class:`~llmsession.InvalidHandleError`."""

    _what = "handle"

    def __init__(self, ptr: int, free: Callable[[int], None]) -> None:
        self._ptr: Optional[int] = ptr
        self._free = free
        self._finalizer = weakref.finalize(self, free, ptr)

    @property
    def ptr(self) -> int:
        """The raw handle (for the C ABI); raises once closed."""
        p = self._ptr
        if p is None:
            raise closed_error(self._what)
        return p

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        """Frees the handle now. Idempotent."""
        if self._ptr is not None:
            self._ptr = None
            self._finalizer()  # frees once

    def __enter__(self: H) -> H:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
