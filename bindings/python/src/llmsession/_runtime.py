"""Plumbing shared by every object: JSON in and out, operations, host callbacks.

An *operation* is one library call made by this binding. Host callbacks the library runs
during it (on the calling thread) record exceptions on it, and the operation re-raises the
first one after the library call returns. A callback answers at once (its return value), or
later from any thread: it returns a :class:`concurrent.futures.Future` (for instance
:class:`PendingReply`, or what ``executor.submit`` gives), a coroutine, or an asyncio awaitable,
and the reply is completed when that finishes (``lls_reply_complete`` / ``lls_reply_fail``)
while the library waits on the calling thread with the GIL released.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import inspect
import itertools
import json
import threading
from ctypes import byref, c_size_t, c_void_p
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _native as N
from .errors import CallbackError, Status, check, take_error

# ---------------------------------------------------------------------------------------------
# JSON


_PLAIN = (dict, list, tuple, int, float, bool, type(None))


def dumps(v: Any) -> bytes:
    """JSON text of ``v``: bytes and str are taken as JSON text already; an object of a
    provider SDK (a pydantic model: ``to_json()``, ``model_dump_json()``) gives its own JSON;
    anything else goes through ``json.dumps`` (SDK objects nested in it included)."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    if not isinstance(v, _PLAIN):
        t = _model_json(v)
        if t is not None:
            return t
    return dumps_value(v)


def dumps_value(v: Any) -> bytes:
    """JSON of ``v``, where a str is a JSON string (not JSON text)."""
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=_model_value).encode("utf-8")


def _model_json(v: Any) -> Optional[bytes]:
    """The JSON text a provider SDK's object gives of itself, or None for other objects.
    ``to_json()`` first (the ``openai`` and ``anthropic`` packages: the wire's field names, only
    the fields the provider sent), then pydantic's ``model_dump_json`` with the wire's names
    (aliases) and only the fields that were set."""
    f = getattr(v, "to_json", None)
    if callable(f):
        t = f()
    else:
        f = getattr(v, "model_dump_json", None)
        if not callable(f):
            return None
        t = f(by_alias=True, exclude_unset=True)
    if isinstance(t, str):
        return t.encode("utf-8")
    if isinstance(t, (bytes, bytearray)):
        return bytes(t)
    raise TypeError(f"{type(v).__name__}.{f.__name__}() gave a {type(t).__name__}, not JSON text")


def _model_value(o: Any) -> Any:
    """``json.dumps``'s ``default``: an SDK object inside a JSON argument, as plain data."""
    t = _model_json(o)
    if t is None:
        raise TypeError(
            f"Object of type {type(o).__name__} is not JSON serializable (a JSON argument is a dict, "
            "list, str, bytes, number, bool, None, or an object with to_json() or model_dump_json())"
        )
    return json.loads(t)


def opt(v: Any) -> Tuple[Optional[bytes], int]:
    """An optional JSON argument: (NULL, 0) for None."""
    if v is None:
        return None, 0
    b = dumps(v)
    return b, len(b)


def text(s: Any, what: str) -> bytes:
    if isinstance(s, bytes):
        return s
    if not isinstance(s, str):
        raise TypeError(f"{what}: expected a str, got {type(s).__name__}")
    return s.encode("utf-8")


def take_bytes(ptr: c_void_p, n: c_size_t) -> Optional[bytes]:
    """Copies an owned output and frees it (None for a NULL output)."""
    if not ptr.value:
        return None
    try:
        return ctypes.string_at(ptr.value, n.value)
    finally:
        N.lib.lls_string_free(ptr)


# ---------------------------------------------------------------------------------------------
# Operations


class _Op:
    __slots__ = ("errors", "loop", "scheduled")

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop]) -> None:
        self.errors: List[BaseException] = []
        self.loop = loop
        # Coroutines of this operation's callbacks scheduled on the loop: any still running when
        # the library call returns (it was cancelled or disposed) is cancelled, which fails its
        # abandoned reply.
        self.scheduled: List["concurrent.futures.Future[Any]"] = []


class _Local(threading.local):
    def __init__(self) -> None:
        self.ops: List[_Op] = []
        self.loop: Optional[asyncio.AbstractEventLoop] = None


_tls = _Local()


def run_with_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """Runs ``fn`` on this (executor) thread with coroutine callbacks scheduled on ``loop``."""
    before = _tls.loop
    _tls.loop = loop
    try:
        return fn(*args, **kw)
    finally:
        _tls.loop = before


def call(fn: Callable[..., int], *args: Any, on_ok: Optional[Callable[[], Any]] = None) -> Any:
    """Calls an entry point whose last argument is ``lls_error **err``, as one operation: the first
    exception a callback raised wins; otherwise a failure raises the library's error."""
    op = _Op(_tls.loop)
    _tls.ops.append(op)
    err = c_void_p()
    try:
        status = fn(*args, byref(err))
    finally:
        _tls.ops.pop()
        for f in op.scheduled:
            f.cancel()
    if op.errors:
        if status != Status.OK:
            take_error(status, err)  # freed; the callback's exception says more
        elif on_ok is not None:
            try:
                on_ok()  # free what the call returned
            except Exception:
                pass
        raise op.errors[0]
    check(status, err)
    return on_ok() if on_ok is not None else None


def call_out(fn: Callable[..., int], *args: Any) -> Optional[bytes]:
    """Calls an entry point ending in ``(char **out, size_t *out_len, lls_error **err)``."""
    out = c_void_p()
    n = c_size_t()
    result: Optional[bytes] = call(fn, *args, byref(out), byref(n), on_ok=lambda: take_bytes(out, n))
    return result


def call_json(fn: Callable[..., int], *args: Any) -> Any:
    b = call_out(fn, *args)
    return None if b is None else json.loads(b)


# ---------------------------------------------------------------------------------------------
# Host callbacks

Encoder = Callable[[Any], bytes]


class PendingReply(concurrent.futures.Future):  # type: ignore[type-arg]
    """A reply a callback returns to answer later, from any thread: ``resolve(value)`` answers
    (``value`` as the callback would have returned it), ``fail(message)`` fails it as a raised
    :class:`CallbackError` would. A pending reply must be answered exactly once, even after the
    operation was cancelled."""

    def resolve(self, value: Any = None) -> None:
        self.set_result(value)

    def fail(self, message: str) -> None:
        self.set_exception(CallbackError(message))


class _Entry:
    __slots__ = ("fn", "encode")

    def __init__(self, fn: Callable[[Any], Any], encode: Encoder) -> None:
        self.fn = fn
        self.encode = encode


_registry: Dict[int, _Entry] = {}
_ids = itertools.count(1)
_lock = threading.Lock()


def _answer(reply: int, data: bytes, pending: bool) -> None:
    err = c_void_p()
    f = N.lib.lls_reply_complete if pending else N.lib.lls_reply_set_json
    if f(reply, data, len(data), byref(err)) != Status.OK and err.value:
        # The library answered the reply with the failure (unusable JSON) or it was answered
        # already: the library call reports it.
        N.lib.lls_error_free(err)


def _fail(reply: int, message: str) -> None:
    b = (message or "host callback failed").encode("utf-8", "replace")
    err = c_void_p()
    if N.lib.lls_reply_fail(reply, b, len(b), byref(err)) != Status.OK and err.value:
        N.lib.lls_error_free(err)


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__


def _trampoline_body(ud: Optional[int], in_ptr: Optional[int], in_len: int, reply: int) -> int:
    entry = _registry.get(ud or 0)
    op = _tls.ops[-1] if _tls.ops else None
    if entry is None:
        _fail(reply, "llmsession (python): callback not registered")
        return N.CB_ERROR
    try:
        value = json.loads(ctypes.string_at(in_ptr, in_len)) if in_ptr else None
        result = entry.fn(value)
        if inspect.isawaitable(result):
            loop = op.loop if op is not None else _tls.loop
            if loop is None:
                result = _run_coroutine(result)
            else:
                result = asyncio.run_coroutine_threadsafe(_awaited(result), loop)
                if op is not None:
                    op.scheduled.append(result)
        if isinstance(result, concurrent.futures.Future):
            _settle_later(result, entry.encode, reply, op)
            return N.CB_PENDING
        data = entry.encode(result)
    except BaseException as e:  # nothing may unwind through the C frame
        if op is not None and not isinstance(e, CallbackError):
            op.errors.append(e)
        _fail(reply, _describe(e))
        return N.CB_ERROR
    _answer(reply, data, False)
    return N.CB_OK


async def _awaited(aw: Any) -> Any:
    return await aw


def _run_coroutine(aw: Any) -> Any:
    """An awaitable a callback returned outside an asyncio operation: run to completion here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(aw))
    if inspect.iscoroutine(aw):
        aw.close()  # never awaited: closed, so that nothing warns about it later
    raise RuntimeError(
        "llmsession: an async callback ran in a plain call made on the event loop's own thread "
        "(which it would block); from async code use AsyncAgent and await its methods"
    )


def _settle_later(fut: "concurrent.futures.Future[Any]", encode: Encoder, reply: int, op: Optional[_Op]) -> None:
    def done(f: "concurrent.futures.Future[Any]") -> None:
        try:
            if f.cancelled():
                raise CallbackError("the callback's future was cancelled")
            exc = f.exception()
            if exc is not None:
                raise exc
            data = encode(f.result())
        except BaseException as e:
            if op is not None and not isinstance(e, (CallbackError, concurrent.futures.CancelledError)):
                op.errors.append(e)  # before the reply fails: the operation sees it when it returns
            _fail(reply, _describe(e))
            return
        _answer(reply, data, True)

    fut.add_done_callback(done)


def _trampoline(ud: Optional[int], in_ptr: Optional[int], in_len: int, reply: Optional[int]) -> int:
    try:
        return _trampoline_body(ud, in_ptr, in_len, reply or 0)
    except BaseException:  # pragma: no cover - last resort, never unwind into C
        return N.CB_ERROR


def _userdata_free(ud: Optional[int]) -> None:
    with _lock:
        _registry.pop(ud or 0, None)


def register(fn: Callable[[Any], Any], encode: Encoder) -> int:
    """A registration for ``fn``: pass ``(TRAMPOLINE, id, USERDATA_FREE)``; the library releases
    it (``userdata_free``) when the callback is removed, its owner freed, or registration fails."""
    if not callable(fn):
        raise TypeError(f"expected a callable, got {type(fn).__name__}")
    with _lock:
        i = next(_ids)
        _registry[i] = _Entry(fn, encode)
    return i


# The C function pointers every registration passes (module-level: they live as long as the module).
TRAMPOLINE = N.CALLBACK_FN(_trampoline)
USERDATA_FREE = N.FREE_FN(_userdata_free)


def registered_callback_count() -> int:
    """How many Python callbacks the library holds (registered and not yet released)."""
    return len(_registry)


def encode_any(v: Any) -> bytes:
    return dumps_value(v)


def encode_ignore(_v: Any) -> bytes:
    return b"null"


def encode_summary(v: Any) -> bytes:
    return dumps_value({"text": v} if isinstance(v, str) else v)


def invoke_callback(fn: Callable[[Any], Any], value: Any, cancel: Any = None) -> Any:
    """Runs ``fn`` through the library's own callback machinery (``lls_callback_invoke``), as
    it runs listeners, and returns its answer as the library received it: a self-test of the
    callback path (pending replies, failures, cancellation)."""
    i = register(fn, encode_any)
    b = dumps_value(value)
    c = None if cancel is None else cancel.ptr
    out = call_out(N.lib.lls_callback_invoke, TRAMPOLINE, i, USERDATA_FREE, b, len(b), c)
    return None if out is None else json.loads(out)
