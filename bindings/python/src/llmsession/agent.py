"""Agent instances (``lls_agent``): the turn loop over a session."""

from __future__ import annotations

import json
from ctypes import byref, c_int32, c_size_t, c_uint64, c_void_p
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union, cast

from . import _native as N
from ._handle import Handle
from ._runtime import (
    TRAMPOLINE,
    USERDATA_FREE,
    call,
    call_json,
    call_out,
    dumps,
    encode_any,
    encode_ignore,
    encode_summary,
    opt,
    register,
    take_bytes,
    text,
)
from .cancel import Cancel
from .clock import CacheClock
from .errors import LlmSessionError, SummariserError
from .native_compaction import NativeCompaction
from .session import Session
from .stream import Stream
from .tools import ToolCall, tool_calls as _read_tool_calls
from .types import (
    AgentOptions,
    ChildOutcome,
    CompactionOutcome,
    Message,
    PolicyTable,
    Policy,
    PrefixListenerInput,
    PreStepInput,
    RequestInfo,
    Response,
    SummaryInput,
    SummaryOutput,
    ToolResult,
)

MessageLike = Union[str, Message, Mapping[str, Any]]
PrefixListener = Callable[[PrefixListenerInput], Any]
"""``(input) -> messages`` (or a Future / awaitable of them): the extended message array."""
PreStepListener = Callable[[PreStepInput], Any]
"""``(input) -> None`` (its answer is ignored; a Future / awaitable is waited for)."""
Summariser = Callable[[SummaryInput], Any]
"""``(input) -> {"text", "usage"?, ...} | str`` (or a Future / awaitable of it)."""
TokenCounter = Callable[[Dict[str, Any]], Any]
"""``(item) -> int | {"tokens": int}`` (or a Future / awaitable of it)."""


def user_message(m: MessageLike) -> Any:
    """A str is a user text message; anything else is passed on as it is."""
    if isinstance(m, str):
        return {"role": "user", "content": [{"type": "text", "text": m}]}
    return m


def _cancel_ptr(cancel: Optional[Cancel]) -> Optional[int]:
    if cancel is None:
        return None
    if not isinstance(cancel, Cancel):
        raise TypeError(f"cancel: expected a Cancel, got {type(cancel).__name__}")
    return cancel.ptr


@dataclass(frozen=True)
class Request:
    """A built request: ``bytes`` (the exact envelope, whose digest the log records) and
    ``info``; ``json`` and ``envelope`` decode it."""

    bytes: bytes
    info: RequestInfo

    @property
    def json(self) -> str:
        return self.bytes.decode("utf-8")

    @property
    def envelope(self) -> Dict[str, Any]:
        return cast(Dict[str, Any], json.loads(self.bytes))


@dataclass(frozen=True)
class Body:
    """A provider body ready to POST (``body``) and what request it is (``info``)."""

    body: bytes
    info: RequestInfo = field(repr=False)

    @property
    def json(self) -> str:
        return self.body.decode("utf-8")


@dataclass(frozen=True)
class Recorded:
    """What :meth:`Agent.record_body` / :meth:`Agent.record_stream` logged: the seq of the
    ``assistant/message``, the tool calls it made (:attr:`tool_calls`: id, name, arguments; run
    them and report each with :meth:`Agent.record_tool_result`), and the response's finish
    reason, which the log does not keep: normalised (``"stop"``, ``"tool-calls"``,
    ``"max-tokens"``, ``"pause-turn"``: the turn is not over, build the next request of the same
    turn, ``"refusal"``, ``"context-overflow"``, ``"content-filter"``, ``"incomplete"`` for a cut
    stream recorded with ``partial``), a provider's own word, or ``None`` when it gives none."""

    seq: int
    tool_call_count: int
    finish_reason: Optional[str] = None
    session: Optional[Session] = field(default=None, repr=False, compare=False)

    @cached_property
    def tool_calls(self) -> List[ToolCall]:
        """The recorded message's tool calls, in order, as the log holds them: read from the
        session on first access (a response without calls reads nothing), so read them before
        the session is closed."""
        if self.tool_call_count == 0:
            return []
        if self.session is None:
            raise ValueError("this Recorded names no session to read its tool calls from")
        return _read_tool_calls(call_out(N.lib.lls_session_events, self.session.ptr, self.seq, self.seq + 1))


def _recorded(r: "N.RecordedInfoStruct", session: Session) -> Recorded:
    finish = r.finish_reason.decode("utf-8")
    return Recorded(r.seq, r.tool_calls, finish or None, session)


_PURPOSES = ("conversation", "compaction", "keepalive")


def _info(s: N.RequestInfoStruct) -> RequestInfo:
    return {
        "turn": s.turn,
        "step": s.step,
        "digest": s.digest.decode("ascii"),
        "bytes": s.envelope_len,
        "prefixLen": s.prefix_len,
        "messageCount": s.message_count,
        "sharedMessages": s.shared_messages,
        "instance": s.instance,
        "stepSeq": s.step_seq,
        "purpose": cast(Any, _PURPOSES[s.purpose] if s.purpose < len(_PURPOSES) else f"unknown-{s.purpose}"),
    }


class Agent(NativeCompaction, CacheClock, Handle):
    """An agent instance over a session: ``Agent(session, {"config": {...}, "system"?,
    "tools"?, ...})``. ``with`` disposes and frees it. Calls on one agent are serialised by the
    library; callbacks run on the thread that made the call. The cache clock's methods
    (:meth:`cache_clock`, :meth:`keepalive_body`, :meth:`compact_idle`) are in clock.py."""

    _what = "agent"

    def __init__(self, session: Session, options: Union[AgentOptions, Mapping[str, Any], str]) -> None:
        """``options`` without ``config`` (``{}``) wake the session: the agent sends what its
        last request carried (see :func:`llmsession.tree.wake`)."""
        if not isinstance(session, Session):
            raise TypeError(f"Agent needs a Session, got {type(session).__name__}")
        b = dumps(options)
        out = c_void_p()
        call(N.lib.lls_agent_new, session.ptr, b, len(b), byref(out))
        self._adopt(out.value or 0, session)

    def _adopt(self, ptr: int, session: Session) -> None:
        Handle.__init__(self, ptr, N.lib.lls_agent_free)
        self.session = session

    # -- agent trees (tree.py) ----------------------------------------------------------------

    def spawn(self, directive: MessageLike, call_id: Optional[str] = None, **options: Any) -> "Tuple[Session, Agent]":
        """Spawns a child agent from this agent's open tool call ``call_id`` (None: at a turn
        boundary): see :func:`llmsession.tree.spawn`."""
        from .tree import spawn

        return spawn(self, directive, call_id, **options)

    def finish_child(self, child: "Agent", error: Optional[str] = None) -> ChildOutcome:
        """Records ``child``'s answer as this agent's tool result: see
        :func:`llmsession.tree.finish_child`."""
        from .tree import finish_child

        return finish_child(self, child, error)

    # -- options ------------------------------------------------------------------------------

    def set_options(self, options: Union[AgentOptions, Mapping[str, Any]]) -> None:
        """Replaces ``{"config", "system"?, "tools"?, "checkRequests"?}`` for the next request."""
        b = dumps(options)
        call(N.lib.lls_agent_set_options, self.ptr, b, len(b))

    def set_policy(self, policy: Union[Policy, PolicyTable, None]) -> None:
        """Sets the compaction policy (None: no automatic compaction)."""
        b = dumps(json.dumps(policy))
        call(N.lib.lls_agent_set_policy, self.ptr, b, len(b))

    def set_tokenizer(self, path: str) -> None:
        """Counts tokens with a HuggingFace ``tokenizer.json``."""
        b = text(path, "set_tokenizer")
        call(N.lib.lls_agent_set_tokenizer, self.ptr, b, len(b))

    def clear_token_counter(self) -> None:
        """Back to the built-in estimate."""
        call(N.lib.lls_agent_clear_token_counter, self.ptr)

    def set_renderer(self, renderer: str, options: Optional[Mapping[str, Any]] = None) -> None:
        """Renderer of :meth:`next_body`: ``"openai"``, ``"openai-responses"``, ``"anthropic"``
        or ``"gemini"`` / ``"gemini-interactions"``; options ``{"promptCacheKey"?, "promptCacheRetention"?, "cacheTtl"?,
        "promptCacheOptions"?, "promptCacheBreakpoints"?, "cacheDiagnostics"?}``."""
        r = text(renderer, "set_renderer")
        o, n = opt(options)
        call(N.lib.lls_agent_set_renderer, self.ptr, r, len(r), o, n)

    # -- callbacks ----------------------------------------------------------------------------

    def _register(self, c: Callable[..., int], fn: Callable[[Any], Any], encode: Callable[[Any], bytes]) -> None:
        p = self.ptr
        i = register(fn, encode)  # released by the library, also when this call fails
        call(c, p, TRAMPOLINE, i, USERDATA_FREE)

    def add_prefix_listener(self, fn: PrefixListener) -> None:
        """Adds a session prefix listener ``({"rest", "instance", "turn"}) -> messages``."""
        self._register(N.lib.lls_agent_add_prefix_listener, fn, encode_any)

    def add_pre_step_listener(self, fn: PreStepListener) -> None:
        """Adds a pre-step listener ``({"prefix", "system", "tools", "turn", "step"}) -> None``."""
        self._register(N.lib.lls_agent_add_pre_step_listener, fn, encode_ignore)

    def set_summariser(self, fn: Summariser) -> None:
        """Sets the summariser ``(input) -> {"text", "usage"?, ...} | str``."""
        self._register(N.lib.lls_agent_set_summariser, fn, encode_summary)

    def set_token_counter(self, fn: TokenCounter) -> None:
        """Sets a host token counter ``({"kind": "system" | "tools" | "message", ...}) -> int``."""
        self._register(N.lib.lls_agent_set_token_counter, fn, encode_any)

    # -- the turn loop ------------------------------------------------------------------------

    def start_turn(self, message: MessageLike) -> int:
        """Opens a turn with the user's message (a str or a message); returns the turn."""
        b = dumps(user_message(message))
        turn = c_uint64()
        call(N.lib.lls_agent_start_turn, self.ptr, b, len(b), byref(turn))
        return turn.value

    def next_request(self, cancel: Optional[Cancel] = None) -> Request:
        """Builds the next request (prefix listeners, pre-step listeners, the pressure gate,
        the header, ``step/start``): its exact envelope bytes and info."""
        p = self.ptr
        raw = call_out(N.lib.lls_agent_next_request, p, _cancel_ptr(cancel)) or b""
        return Request(raw, self.request_info())

    def request_info(self) -> RequestInfo:
        """The last request's ``{"turn", "step", "digest", "bytes", "prefixLen", ...}``."""
        return cast(RequestInfo, call_json(N.lib.lls_agent_request_info, self.ptr))

    def next_body(self, cancel: Optional[Cancel] = None) -> Body:
        """Builds the next request as :meth:`next_request` does and returns the provider body
        ready to POST (needs :meth:`set_renderer`)."""
        out = c_void_p()
        n = c_size_t()
        info = N.RequestInfoStruct()
        body = call(
            N.lib.lls_agent_next_body,
            self.ptr,
            _cancel_ptr(cancel),
            byref(out),
            byref(n),
            byref(info),
            on_ok=lambda: take_bytes(out, n),
        )
        return Body(body or b"", _info(info))

    def last_envelope(self) -> bytes:
        """The envelope of the last request built (the logged bytes)."""
        return call_out(N.lib.lls_agent_last_envelope, self.ptr) or b""

    def record_response(self, response: Union[Response, Mapping[str, Any], str, bytes, Any]) -> int:
        """Records ``{"message", "usage"?}`` (a dict, JSON text, or an object with ``to_json()`` /
        ``model_dump_json()``); returns the assistant message's seq (its tool calls:
        :func:`llmsession.tool_calls` of the response)."""
        b = dumps(response)
        seq = c_uint64()
        call(N.lib.lls_agent_record_response, self.ptr, b, len(b), byref(seq))
        return seq.value

    def record_body(self, body: Union[bytes, str, Mapping[str, Any], Any]) -> Recorded:
        """Records the provider's non-streamed response body, parsed with the renderer: the raw
        bytes (or str), the parsed JSON (a dict), or a provider SDK's response object (one with
        ``to_json()`` or ``model_dump_json()``, such as what ``openai``'s
        ``client.chat.completions.create`` returns). The :class:`Recorded` gives its tool calls."""
        b = dumps(body)
        r = N.RecordedInfoStruct()
        call(N.lib.lls_agent_record_body_info, self.ptr, b, len(b), byref(r))
        return _recorded(r, self.session)

    def record_stream(self, stream: Stream, partial: bool = False) -> Recorded:
        """Records the response a :class:`Stream` accumulated, at its end."""
        if not isinstance(stream, Stream):
            raise TypeError(f"record_stream: expected a Stream, got {type(stream).__name__}")
        r = N.RecordedInfoStruct()
        call(N.lib.lls_agent_record_stream_info, self.ptr, stream.ptr, bool(partial), byref(r))
        return _recorded(r, self.session)

    def record_tool_result(self, result: Union[ToolResult, Mapping[str, Any]]) -> int:
        """Records ``{"callId", "text" | "content", "isError"?}``; returns how many were written."""
        b = dumps(result)
        n = c_size_t()
        call(N.lib.lls_agent_record_tool_result, self.ptr, b, len(b), byref(n))
        return n.value

    def inject(self, message: MessageLike) -> Optional[int]:
        """Durable host context; returns its seq, or None when deferred to the tool batch's end."""
        b = dumps(user_message(message))
        seq = c_uint64()
        call(N.lib.lls_agent_inject, self.ptr, b, len(b), byref(seq))
        return None if seq.value == N.SEQ_NONE else seq.value

    def provider_error(self, error: Union[str, Mapping[str, Any]], cancel: Optional[Cancel] = None) -> bool:
        """Records a provider failure (``{"message", "overflow"?}``); True when an overflow was
        compacted and the request should be retried."""
        b = dumps({"message": error} if isinstance(error, str) else error)
        retry = c_int32()
        call(N.lib.lls_agent_provider_error, self.ptr, b, len(b), _cancel_ptr(cancel), byref(retry))
        return retry.value == 1

    def end_turn(self, reason: str = "completed") -> None:
        """Ends the turn (``completed``, ``max-tokens``, ``aborted``, ``error``, ...)."""
        b = text(reason, "end_turn")
        call(N.lib.lls_agent_end_turn, self.ptr, b, len(b))

    def compact(self, span: Optional[Sequence[int]] = None, cancel: Optional[Cancel] = None) -> CompactionOutcome:
        """Compacts now (the head region, or ``span`` = ``[start, end]``). A compaction that did
        not land because of the summariser raises :class:`SummariserError` (its detail's
        ``outcome`` holds the outcome)."""
        b = dumps({} if span is None else {"span": list(span)})
        return cast(CompactionOutcome, json.loads(call_out(N.lib.lls_agent_compact, self.ptr, b, len(b), _cancel_ptr(cancel)) or b"null"))

    def measure(self) -> Dict[str, Any]:
        """Token counts of the next request's prompt and the gate's threshold."""
        return cast(Dict[str, Any], call_json(N.lib.lls_agent_measure, self.ptr))

    def stats(self) -> Dict[str, Any]:
        return cast(Dict[str, Any], call_json(N.lib.lls_agent_stats, self.ptr))

    def prefix(self) -> Optional[List[Message]]:
        """The frozen session prefix, or None before the first request."""
        return cast(Optional[List[Message]], call_json(N.lib.lls_agent_prefix, self.ptr))

    def dispose(self) -> None:
        """Ends an open turn ``disposed`` and releases callbacks and the session. From inside one
        of this agent's callbacks it returns at once and the running call fails with
        :class:`DisposedError`; from another thread it waits for the running call."""
        if self._ptr is not None:
            call(N.lib.lls_agent_dispose, self._ptr)


def compaction_outcome(e: LlmSessionError) -> Optional[CompactionOutcome]:
    """The outcome a failed :meth:`Agent.compact` carries (a SummariserError's detail)."""
    o = e.detail.get("outcome") if isinstance(e, SummariserError) else None
    return cast(CompactionOutcome, o) if isinstance(o, dict) else None
