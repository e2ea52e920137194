"""Errors: one base class, :class:`LlmSessionError`, and a subclass per library status."""

from __future__ import annotations

import json
from ctypes import c_void_p
from typing import Any, Dict, Optional, Type

from . import _native as N


class Status:
    """Status codes (``lls_status``), as in include/llmsession.h."""

    OK = 0
    MALFORMED_JSON = 1
    INVALID_INPUT = 2
    OUT_OF_ORDER = 3
    BUSY = 4
    CORRUPT_LOG = 5
    STORAGE = 6
    CANCELLED = 7
    DISPOSED = 8
    LISTENER = 9
    SUMMARISER = 10
    RECONSTRUCTION = 11
    INVALID_POLICY = 12
    OVERFLOW_BUDGET = 13
    NOTHING_TO_COMPACT = 14
    TOKENIZER = 15
    POISONED = 16
    INTERNAL = 17
    LOCKED = 18
    CONFLICT = 19
    READ_ONLY = 20
    NULL_POINTER = 100
    INVALID_UTF8 = 101
    INVALID_HANDLE = 102
    PANIC = 103
    INVALID_ARGUMENT = 104
    REPLY_STATE = 105
    OUT_OF_MEMORY = 106


class LlmSessionError(Exception):
    """An error reported by llmsession.

    ``status`` is the ``lls_status`` code, ``kind`` its stable name (``"listener"``,
    ``"corrupt-log"``, ...), ``message`` the library's message and ``detail`` the parsed JSON
    detail (``kind``, ``status``, ``message`` and context keys such as ``field``, ``seq``,
    ``line``, ``callback``).
    """

    status: int = -1

    def __init__(self, status: int, message: str, detail: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail: Dict[str, Any] = detail if detail is not None else {
            "kind": N.status_name(status),
            "status": status,
            "message": message,
        }
        self.kind: str = str(self.detail.get("kind") or N.status_name(status))

    @property
    def field(self) -> Any:
        """The detail's ``field`` (which input was wrong), or None."""
        return self.detail.get("field")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind}: {self.message!r})"


class CallbackError(Exception):
    """Raised by a callback (listener, summariser, token counter, store) to fail its reply on
    purpose: the library call then fails with the library's own error, whose message includes
    this one. Any other exception from a callback is a bug in it and is re-raised as it is by
    the operation that ran the callback."""


# One subclass per status; the docstrings are the meanings in docs/abi.md.
class MalformedJsonError(LlmSessionError, ValueError):
    """Input JSON does not parse (detail ``line``, ``column``)."""


class InvalidInputError(LlmSessionError, ValueError):
    """JSON of the wrong shape (detail ``field``)."""


class OutOfOrderError(LlmSessionError):
    """The call is not allowed in the current state."""


class BusyError(LlmSessionError):
    """A second live agent instance over one session."""


class CorruptLogError(LlmSessionError):
    """A stored log is damaged (detail ``line``)."""


class StorageError(LlmSessionError):
    """A storage operation failed."""


class CancelledError(LlmSessionError):
    """A cancel token tripped (not asyncio's ``CancelledError``)."""


class DisposedError(LlmSessionError):
    """The agent instance was disposed."""


class ListenerError(LlmSessionError):
    """A host callback failed or answered unusable data (detail ``callback``)."""


class SummariserError(LlmSessionError):
    """The summariser failed or its output was rejected (detail ``outcome`` from compact)."""


class ReconstructionError(LlmSessionError):
    """A rebuilt request differs from the sent bytes."""


class InvalidPolicyError(LlmSessionError, ValueError):
    """A compaction policy is invalid."""


class OverflowBudgetError(LlmSessionError):
    """Context overflow with the retry budget spent."""


class NothingToCompactError(LlmSessionError):
    """Nothing to compact."""


class TokenizerError(LlmSessionError):
    """The tokenizer failed."""


class PoisonedError(LlmSessionError):
    """The object was poisoned by an earlier panic."""


class InternalError(LlmSessionError):
    """An internal invariant failed (a bug)."""


class LockedError(LlmSessionError):
    """The session is in use: another writer holds its lock or lease (detail ``holder``)."""


class ConflictError(LlmSessionError):
    """The store refused an append: another writer appended first (detail ``seq``)."""


class ReadOnlyError(LlmSessionError):
    """The session was opened read-only."""


class NullPointerError(LlmSessionError):
    """A required pointer is NULL (detail ``argument``)."""


class InvalidUtf8Error(LlmSessionError, ValueError):
    """Text is not UTF-8 (detail ``argument``, ``validUpTo``)."""


class InvalidHandleError(LlmSessionError):
    """A freed, unknown or wrong-type handle (a closed object, in this binding)."""


class PanicError(LlmSessionError):
    """llmsession panicked (a bug)."""


class InvalidArgumentError(LlmSessionError, ValueError):
    """A non-pointer argument out of range (detail ``argument``)."""


class ReplyStateError(LlmSessionError):
    """A reply was answered twice."""


class OutOfMemoryError(LlmSessionError, MemoryError):
    """An output buffer could not be allocated."""


ERROR_CLASSES: Dict[int, Type[LlmSessionError]] = {
    Status.MALFORMED_JSON: MalformedJsonError,
    Status.INVALID_INPUT: InvalidInputError,
    Status.OUT_OF_ORDER: OutOfOrderError,
    Status.BUSY: BusyError,
    Status.CORRUPT_LOG: CorruptLogError,
    Status.STORAGE: StorageError,
    Status.CANCELLED: CancelledError,
    Status.DISPOSED: DisposedError,
    Status.LISTENER: ListenerError,
    Status.SUMMARISER: SummariserError,
    Status.RECONSTRUCTION: ReconstructionError,
    Status.INVALID_POLICY: InvalidPolicyError,
    Status.OVERFLOW_BUDGET: OverflowBudgetError,
    Status.NOTHING_TO_COMPACT: NothingToCompactError,
    Status.TOKENIZER: TokenizerError,
    Status.POISONED: PoisonedError,
    Status.INTERNAL: InternalError,
    Status.LOCKED: LockedError,
    Status.CONFLICT: ConflictError,
    Status.READ_ONLY: ReadOnlyError,
    Status.NULL_POINTER: NullPointerError,
    Status.INVALID_UTF8: InvalidUtf8Error,
    Status.INVALID_HANDLE: InvalidHandleError,
    Status.PANIC: PanicError,
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.REPLY_STATE: ReplyStateError,
    Status.OUT_OF_MEMORY: OutOfMemoryError,
}
for _code, _c in ERROR_CLASSES.items():
    _c.status = _code


def error_for(status: int, message: str, detail: Optional[Dict[str, Any]] = None) -> LlmSessionError:
    """The exception of the class that belongs to ``status`` (the base class for an unknown one)."""
    cls = ERROR_CLASSES.get(status, LlmSessionError)
    return cls(status, message, detail)


def take_error(status: int, err: c_void_p) -> LlmSessionError:
    """Turns an ``lls_error *`` into an exception and frees it."""
    if not err.value:
        return error_for(status, f"llmsession call failed with status {status}")
    try:
        code = N.lib.lls_error_code(err)
        message = (N.lib.lls_error_message(err) or b"").decode("utf-8", "replace")
        raw = N.lib.lls_error_detail(err) or b"null"
        try:
            detail = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            detail = None
        if not isinstance(detail, dict):
            detail = None
    finally:
        N.lib.lls_error_free(err)
    return error_for(code, message, detail)


def check(status: int, err: c_void_p) -> None:
    if status != Status.OK:
        raise take_error(status, err)


def closed_error(what: str) -> InvalidHandleError:
    """What a method of a closed object raises."""
    msg = f"this {what} was closed"
    return InvalidHandleError(Status.INVALID_HANDLE, msg, {"kind": "invalid-handle", "status": Status.INVALID_HANDLE, "message": msg})


def out_of_order(message: str) -> OutOfOrderError:
    return OutOfOrderError(Status.OUT_OF_ORDER, message, {"kind": "out-of-order", "status": Status.OUT_OF_ORDER, "message": message})
