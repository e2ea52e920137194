"""Tool calls (``lls_tool_calls``): the calls an assistant message makes, as data."""

from __future__ import annotations

import ctypes
import json
from ctypes import byref, c_size_t, c_void_p
from dataclasses import dataclass
from functools import cached_property
from typing import Any, List

from . import _native as N
from ._runtime import call, dumps


@dataclass(frozen=True)
class ToolCall:
    """One tool call: ``id`` (the ``callId`` of its result, for
    :meth:`~llmsession.Agent.record_tool_result`), the tool's ``name``, and its arguments:
    ``arguments_json`` as the model wrote them, ``arguments`` parsed."""

    id: str
    name: str
    arguments_json: str

    @cached_property
    def arguments(self) -> Any:
        """The arguments parsed from ``arguments_json`` (an empty text is ``{}``, a tool called
        without arguments). Text that is not JSON (a model may write that) raises
        ``ValueError`` naming the call; report it to the model as the call's error result."""
        if not self.arguments_json.strip():
            return {}
        try:
            return json.loads(self.arguments_json)
        except ValueError as e:
            raise ValueError(f"tool call {self.id} ({self.name}): its arguments are not JSON ({e}): {self.arguments_json!r}") from e


def _text(ptr: c_void_p, n: c_size_t) -> str:
    return ctypes.string_at(ptr.value, n.value).decode("utf-8") if ptr.value else ""


def tool_calls(value: Any) -> List[ToolCall]:
    """The tool calls in ``value``, in the order the model made them (``[]`` when none): an
    assistant message, a response ``{"message", ...}`` (what :func:`parse_response` and
    :meth:`Stream.finish` give), an event, or a list of these; as a dict, JSON text (str or
    bytes), or any JSON argument the binding takes. A malformed tool-call block raises
    :class:`InvalidInputError`."""
    b = dumps(value)
    handle = c_void_p()
    call(N.lib.lls_tool_calls_parse, b, len(b), byref(handle))
    try:
        n = c_size_t()
        call(N.lib.lls_tool_calls_count, handle, byref(n))
        out: List[ToolCall] = []
        for i in range(n.value):
            fields = [(c_void_p(), c_size_t()) for _ in range(3)]
            call(N.lib.lls_tool_calls_get, handle, i, *(byref(x) for f in fields for x in f))
            out.append(ToolCall(*(_text(p, k) for p, k in fields)))
        return out
    finally:
        N.lib.lls_tool_calls_free(handle)
