"""Sessions (``lls_session``): the append-only event log of one conversation."""

from __future__ import annotations

import json
import os
from ctypes import byref, c_uint64, c_void_p
from typing import Any, Callable, Dict, List, Mapping, Optional, Union, cast

from . import _native as N
from ._handle import Handle
from ._runtime import TRAMPOLINE, USERDATA_FREE, call, call_json, call_out, dumps, encode_any, opt, register, text
from .types import LoadReport, Message, NewEvent, SessionEvent, StoredSession, VerifyReport

PathLike = Union[str, "os.PathLike[str]"]
Options = Optional[Mapping[str, Any]]


def _path(p: PathLike) -> bytes:
    return os.fsencode(p)


def _opened(fn: Callable[..., int], *args: Any) -> "Session":
    out = c_void_p()
    call(fn, *args, byref(out))
    return Session(out.value or 0)


class Session(Handle):
    """A session. Open one with :meth:`memory`, :meth:`open_file`, :meth:`open_url` or
    :meth:`open_store`; ``with`` closes it. A writing handle holds the log's lock until closed
    (a second writer gets :class:`~llmsession.LockedError`)."""

    _what = "session"

    def __init__(self, ptr: int) -> None:
        super().__init__(ptr, N.lib.lls_session_free)

    @staticmethod
    def memory(options: Options = None) -> "Session":
        """A new session kept in memory; options ``{"id"?, "durability"?, "checkpoints"?,
        "check"?}``. ``checkpoints`` (every open takes it) says when the session writes
        checkpoints, the derived state an open needs (docs/log.md, "Checkpoints"):
        ``{"everyEvents"?, "everyBytes"?, "atCompaction"?}`` (defaults 1000, 1 MiB, true) or
        ``False`` for none; ``check`` how an open checks the stored log: ``"bounded"`` (the
        default: from the last checkpoint) or ``"full"``. Since ABI 2 minor 6."""
        b = dumps(options or {})
        return _opened(N.lib.lls_session_new_memory, b, len(b))

    @staticmethod
    def open_file(path: PathLike, options: Options = None) -> "Session":
        """Opens (or creates) the session stored in a JSONL file. Options ``{"id"?,
        "durability"?, "checkpoints"?, "check"?, "readOnly"?, "mode"?, "maxBytes"?}`` (see
        :meth:`memory`). It reads the file from its last checkpoint. A torn tail is cut into a
        sidecar file and an open turn repaired (see :meth:`load_report`)."""
        p = _path(path)
        b = dumps(options or {})
        return _opened(N.lib.lls_session_open_file, p, len(p), b, len(b))

    @staticmethod
    def open_url(url: str, options: Options = None) -> "Session":
        """Opens (or creates) a session in the store a URL names: ``file:PATH`` or
        ``postgres://user:pw@host:port/db?session=ID``."""
        u = text(url, "open_url")
        b = dumps(options or {})
        return _opened(N.lib.lls_session_open_url, u, len(u), b, len(b))

    @staticmethod
    def open_store(store: Callable[[Dict[str, Any]], Any], options: Options = None) -> "Session":
        """Opens (or creates) a session kept by a host store: ``store(request)`` receives
        ``{"op": "load" | "append" | "sync" | "undo" | "cut", ...}`` and answers JSON data
        (docs/python.md, "Host stores"). It runs while the session is locked: it must not call
        into this session, and a pending answer must come from a thread that does not wait for
        the session."""
        i = register(store, encode_any)
        b = dumps(options or {})
        return _opened(N.lib.lls_session_open_store, TRAMPOLINE, i, USERDATA_FREE, b, len(b))

    def fork(self, options: Options = None) -> "Session":
        """A fork of this session: ``{"seedLength"?, "path"?, "url"?, "id"?, "durability"?}``
        (in memory unless ``path`` or ``url``)."""
        b = dumps(options or {})
        return _opened(N.lib.lls_session_fork, self.ptr, b, len(b))

    @property
    def id(self) -> str:
        return (call_out(N.lib.lls_session_id, self.ptr) or b"").decode()

    def info(self) -> Dict[str, Any]:
        """The session header record as stored (id, createdAt, parent, lineage, version)."""
        return cast(Dict[str, Any], call_json(N.lib.lls_session_info, self.ptr))

    def load_report(self) -> LoadReport:
        """What opening cut or repaired: ``{"cutRecords", "repairedEvents", "cutAtLine"?, ...}``."""
        return cast(LoadReport, call_json(N.lib.lls_session_load_report, self.ptr))

    def events(self, start: int = 0, end: Optional[int] = None) -> List[SessionEvent]:
        """Events ``[start, end)`` (to the end when ``end`` is None)."""
        stop = N.SEQ_NONE if end is None else end
        return cast(List[SessionEvent], call_json(N.lib.lls_session_events, self.ptr, start, stop))

    def history(self) -> List[Message]:
        """The derived history (messages)."""
        return cast(List[Message], call_json(N.lib.lls_session_history, self.ptr))

    def header(self) -> Optional[Dict[str, Any]]:
        """The folded request header, or None."""
        return cast(Optional[Dict[str, Any]], call_json(N.lib.lls_session_header, self.ptr))

    def stats(self) -> Dict[str, Any]:
        return cast(Dict[str, Any], call_json(N.lib.lls_session_stats, self.ptr))

    def verify(self) -> VerifyReport:
        """Every check opening makes, then every request rebuilt from the log:
        ``{"events", "requests", "compactions"}``; raises CorruptLogError or
        ReconstructionError."""
        return cast(VerifyReport, call_json(N.lib.lls_session_verify, self.ptr))

    def explain(self, options: Options = None) -> Dict[str, Any]:
        """Why each request hit or missed the provider's cache, every uncached token by cause,
        and with a price table its cost (docs/caching.md); options ``{"tokenizer"?: path,
        "prices"?: {...}, "cacheRules"?: {...}, "tree"?: bool}`` (``tree``: the tree rooted at
        this session, its children spawned in this process, per node and rolled up)."""
        b, n = opt(options)
        return cast(Dict[str, Any], call_json(N.lib.lls_session_explain, self.ptr, b, n))

    def append(self, event: Union[NewEvent, Mapping[str, Any], str, bytes]) -> int:
        """Appends ``{"type", "data", "surfaceOp"?, "sources"?}``; returns its seq."""
        b = dumps(event)
        seq = c_uint64()
        call(N.lib.lls_session_append, self.ptr, b, len(b), byref(seq))
        return seq.value

    def sync(self) -> None:
        """Makes everything durable now."""
        call(N.lib.lls_session_sync, self.ptr)

    def refresh(self) -> int:
        """Reads what another writer appended since; returns how many new events."""
        n = c_uint64()
        call(N.lib.lls_session_refresh, self.ptr, byref(n))
        return n.value

    def export_jsonl(self) -> str:
        """The whole log as JSONL text, every record exactly as stored."""
        return (call_out(N.lib.lls_session_export, self.ptr) or b"").decode("utf-8")


def verify_file(path: PathLike) -> VerifyReport:
    """Verifies a stored JSONL log without opening it (as :meth:`Session.verify`)."""
    p = _path(path)
    return cast(VerifyReport, call_json(N.lib.lls_verify_file, p, len(p)))


def explain_file(path: PathLike, options: Options = None) -> Dict[str, Any]:
    """Explains a stored JSONL log without opening it (as :meth:`Session.explain`); with
    ``{"tree": True}`` ``path`` may be a store URL, and the tree is read from the store."""
    p = _path(path)
    b, n = opt(options)
    return cast(Dict[str, Any], call_json(N.lib.lls_explain_file, p, len(p), b, n))


def list_sessions(url: str, options: Options = None) -> List[StoredSession]:
    """The sessions of the store a URL names, by id (``file:DIR``: one per ``*.jsonl`` log in the
    directory); options ``{"after"?, "limit"?, "parent"?}`` (``parent``: only that session's
    children and forks)."""
    u = text(url, "list_sessions")
    b = dumps(options or {})
    return cast(List[StoredSession], json.loads(call_out(N.lib.lls_store_list_sessions, u, len(u), b, len(b)) or b"[]"))
