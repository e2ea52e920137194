"""Replays (``lls_replay``): a recorded session answering a host's requests offline."""

from __future__ import annotations

from ctypes import byref, c_void_p
from typing import Any, Dict, Mapping, Union, cast

from . import _native as N
from ._handle import Handle
from ._runtime import call, call_json, dumps
from .session import PathLike, Session, _path
from .types import ReplayAnswer


class Replay(Handle):
    """Every request a log records, rebuilt, with its recorded answer: :meth:`answer` returns
    it when an envelope is the recorded request byte for byte and raises
    :class:`~llmsession.ReconstructionError` (detail ``replay: true``) naming the first
    divergence otherwise."""

    _what = "replay"

    def __init__(self, ptr: int) -> None:
        super().__init__(ptr, N.lib.lls_replay_free)

    @staticmethod
    def open_file(path: PathLike) -> "Replay":
        p = _path(path)
        out = c_void_p()
        call(N.lib.lls_replay_open_file, p, len(p), byref(out))
        return Replay(out.value or 0)

    @staticmethod
    def from_session(session: Session) -> "Replay":
        out = c_void_p()
        call(N.lib.lls_replay_new, session.ptr, byref(out))
        return Replay(out.value or 0)

    def answer(self, envelope: Union[bytes, str, Mapping[str, Any]]) -> ReplayAnswer:
        """The recorded answer to an envelope (a :class:`Request`'s ``bytes``, a summariser's
        ``request``)."""
        e = dumps(envelope)
        return cast(ReplayAnswer, call_json(N.lib.lls_replay_answer, self.ptr, e, len(e)))

    def info(self) -> Dict[str, Any]:
        """``{"sessionId", "requests", "answered", "next"?}``."""
        return cast(Dict[str, Any], call_json(N.lib.lls_replay_info, self.ptr))
