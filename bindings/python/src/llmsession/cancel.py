"""Cancel tokens (``lls_cancel``)."""

from __future__ import annotations

from ctypes import byref, c_bool, c_void_p

from . import _native as N
from ._handle import Handle
from ._runtime import call


class Cancel(Handle):
    """A cancel token: pass it to an operation (``next_request``, ``compact``, ...) and
    ``trip()`` it from any thread; the operation then fails with
    :class:`~llmsession.CancelledError` at its next check or while it waits for a pending reply.
    ``with Cancel() as c:`` frees it at the end."""

    _what = "cancel token"

    def __init__(self) -> None:
        out = c_void_p()
        call(N.lib.lls_cancel_new, byref(out))
        super().__init__(out.value or 0, N.lib.lls_cancel_free)

    def trip(self) -> None:
        """Trips the token (idempotent; any thread, any time)."""
        call(N.lib.lls_cancel_trip, self.ptr)

    @property
    def tripped(self) -> bool:
        out = c_bool()
        call(N.lib.lls_cancel_is_tripped, self.ptr, byref(out))
        return bool(out.value)
