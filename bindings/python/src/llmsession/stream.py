"""The stream accumulator (``lls_stream``): one streamed provider response."""

from __future__ import annotations

import json
from ctypes import byref, c_void_p
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union, cast

from . import _native as N
from ._handle import Handle
from ._runtime import call, call_json, call_out, text
from .types import Delta, Response

Chunk = Union[bytes, bytearray, memoryview, str]


class Stream(Handle):
    """Accumulates a streamed response in ``"openai"``, ``"openai-responses"``, ``"anthropic"``
    or ``"gemini"`` / ``"gemini-interactions"`` format: :meth:`feed` the raw event-stream bytes in any chunking, take the
    :meth:`deltas` for display, and :meth:`finish` for the response (what
    :func:`parse_response` gives for the non-streamed body)."""

    _what = "stream"

    def __init__(self, format: str) -> None:
        f = text(format, "Stream")
        out = c_void_p()
        call(N.lib.lls_stream_new, f, len(f), byref(out))
        super().__init__(out.value or 0, N.lib.lls_stream_free)
        self.format = format

    def feed(self, chunk: Chunk) -> None:
        """Feeds the next bytes (need not end at a UTF-8 or event boundary)."""
        if isinstance(chunk, str):
            b = chunk.encode("utf-8")
        elif isinstance(chunk, (bytes, bytearray, memoryview)):
            b = bytes(chunk)
        else:
            hint = ""
            if hasattr(chunk, "to_json") or hasattr(chunk, "model_dump_json"):
                hint = (
                    " (an SDK's parsed chunk: feed the raw bytes of the response instead, e.g. "
                    "openai's with_streaming_response and iter_bytes(); docs/python.md, "
                    '"With the official SDKs")'
                )
            raise TypeError(f"Stream.feed: expected bytes or str, got {type(chunk).__name__}{hint}")
        call(N.lib.lls_stream_feed, self.ptr, b, len(b))

    def next_delta(self) -> Optional[Delta]:
        """The next delta, or None when none is left."""
        b = call_out(N.lib.lls_stream_next_delta, self.ptr)
        return None if b is None else cast(Delta, json.loads(b))

    def deltas(self) -> List[Delta]:
        """Every delta not taken yet, in stream order."""
        out: List[Delta] = []
        while (d := self.next_delta()) is not None:
            out.append(d)
        return out

    def finish(self, partial: bool = False) -> Response:
        """The response; a broken or cut stream raises unless ``partial`` (then
        ``finishReason`` is ``"incomplete"``)."""
        return cast(Response, call_json(N.lib.lls_stream_finish, self.ptr, bool(partial)))

    def body(self) -> Dict[str, Any]:
        """The provider body rebuilt so far, in the non-streamed shape."""
        return cast(Dict[str, Any], call_json(N.lib.lls_stream_body, self.ptr))

    def consume(self, chunks: Iterable[Chunk], on_delta: Optional[Callable[[Delta], None]] = None) -> Response:
        """Feeds every chunk (calling ``on_delta`` as deltas complete) and finishes."""
        for c in chunks:
            self.feed(c)
            if on_delta is not None:
                for d in self.deltas():
                    on_delta(d)
        return self.finish()

    def __iter__(self) -> Iterator[Delta]:
        return iter(self.deltas())
