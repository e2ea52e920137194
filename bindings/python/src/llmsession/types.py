"""The JSON shapes the library takes and returns, as TypedDicts (keys as on the wire).

Every value the binding returns is plain JSON data (dicts, lists, str, int, float, bool,
None); these types name their shapes for type checkers. Dicts with more keys than listed are
accepted (a provider-native block's ``origin``, a call config's pass-through fields).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Literal, Optional, Union

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover - annotations are strings here (never evaluated at run time)
    from typing import TypedDict

    try:
        from typing_extensions import NotRequired
    except ImportError:
        NotRequired = Optional  # only type checkers read it; install typing_extensions for them

Json = Any
"""A JSON value (None, bool, int, float, str, lists and dicts of them)."""


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ReasoningBlock(TypedDict):
    type: Literal["reasoning"]
    text: str
    origin: NotRequired[Dict[str, Json]]


class ToolCallBlock(TypedDict):
    type: Literal["tool-call"]
    id: str
    name: str
    arguments: str
    origin: NotRequired[Dict[str, Json]]


class ToolResultBlock(TypedDict):
    type: Literal["tool-result"]
    toolCallId: str
    content: List["Block"]
    isError: bool


class ImageBlock(TypedDict):
    """An image: ``url``, or ``data`` (base64) with its ``mediaType``."""

    type: Literal["image"]
    url: NotRequired[str]
    mediaType: NotRequired[str]
    data: NotRequired[str]


class FileBlock(TypedDict):
    """A file (a document, audio, video, ...): its ``mediaType`` and one of ``data`` (base64),
    ``url`` and ``fileId`` (the provider's Files API id or URI), with its ``filename``."""

    type: Literal["file"]
    mediaType: str
    data: NotRequired[str]
    url: NotRequired[str]
    fileId: NotRequired[str]
    filename: NotRequired[str]


Block = Union[TextBlock, ReasoningBlock, ToolCallBlock, ToolResultBlock, ImageBlock, FileBlock, Dict[str, Json]]
"""A content block; a type other than the known ones is carried as an opaque object."""


class Message(TypedDict):
    role: str  # "user", "assistant", ...
    content: List[Block]


class Usage(TypedDict, total=False):
    inputTokens: int
    outputTokens: int
    cacheReadTokens: int
    cacheWriteTokens: int
    reasoningTokens: int


class FunctionTool(TypedDict, total=False):
    """A function tool as the request carries it (``name``, ``description`` (optional),
    ``parameters``). OpenAI's ``{"type": "function", "function": {...}}`` is read too."""

    name: str
    description: Optional[str]
    parameters: Dict[str, Json]


class ProviderTool(TypedDict):
    """A provider's own (server-side) tool, sent verbatim to its format only: ``format`` is the
    renderer name, ``tool`` the object in the provider's shape."""

    type: Literal["provider"]
    format: str
    tool: Dict[str, Json]


Tool = Union[FunctionTool, ProviderTool]
"""A tool: a function tool or a provider tool (docs/render.md, "Tools")."""


class CallConfig(TypedDict, total=False):
    provider: str
    model: str


class Policy(TypedDict, total=False):
    contextWindow: int
    threshold: float
    retainedRatio: float
    retainedTokens: int
    summaryMaxTokens: int
    retries: int
    overflowRetries: int
    summaryProvider: str
    summaryModel: str


class PolicyTable(TypedDict, total=False):
    default: Policy
    models: Dict[str, Policy]


class AgentOptions(TypedDict, total=False):
    config: CallConfig
    system: str
    tools: List[Tool]
    checkRequests: bool
    policy: Union[Policy, PolicyTable]
    tokenizer: str


class Response(TypedDict):
    """What ``Agent.record_response`` takes, and ``parse_response`` / ``Stream.finish`` give."""

    message: Message
    usage: NotRequired[Usage]
    finishReason: NotRequired[str]


class ToolResult(TypedDict, total=False):
    callId: str
    text: str
    content: List[Block]
    isError: bool


class RequestInfo(TypedDict):
    """What a built request is (``lls_agent_request_info``; ``purpose`` from ``next_body``)."""

    turn: int
    step: int
    digest: str
    bytes: int
    prefixLen: int
    messageCount: int
    sharedMessages: int
    instance: int
    stepSeq: int
    purpose: NotRequired[Literal["conversation", "compaction", "keepalive"]]
    #: The Anthropic beta flags the request needs (native compaction's, header
    #: ``anthropic-beta``); from ``request_info`` and ``next_request``, absent when none.
    betas: NotRequired[List[str]]


class NativeRequest(TypedDict):
    """A native compaction request (``Agent.begin_native_compaction``)."""

    format: str
    endpoint: str
    betas: List[str]
    envelope: str
    body: str
    digest: str
    span: List[int]
    seqs: List[int]
    messageCount: int
    sharedMessages: int


class NativeOutcome(TypedDict):
    """How a native compaction ended."""

    outcome: Literal["landed", "failed"]
    format: str
    span: List[int]
    seqs: List[int]
    error: NotRequired[str]
    stopReason: NotRequired[str]


class SessionEvent(TypedDict):
    type: str
    seq: int
    time: int
    data: Dict[str, Json]
    surfaceOp: NotRequired[Json]
    sources: NotRequired[Json]


class NewEvent(TypedDict):
    type: str
    data: Dict[str, Json]
    surfaceOp: NotRequired[Json]
    sources: NotRequired[Json]


class LoadReport(TypedDict):
    cutRecords: int
    repairedEvents: int
    cutAtLine: NotRequired[int]
    cutReason: NotRequired[str]
    cutDamaged: NotRequired[bool]
    cutSavedTo: NotRequired[str]


class VerifyReport(TypedDict):
    events: int
    requests: int
    compactions: int


class CompactionOutcome(TypedDict):
    outcome: Literal["landed", "discarded", "failed", "cancelled"]
    span: List[int]
    seqs: List[int]
    request: Dict[str, Json]
    error: NotRequired[str]


class ChildOutcome(TypedDict):
    """What finishing a child gave its parent (``Agent.finish_child``)."""

    child: str
    answer: str
    isError: bool
    recorded: int
    callId: NotRequired[str]


class ClockDecision(TypedDict):
    """The cache clock's answer (``lls_agent_cache_clock``; docs/caching.md, "The cache clock")."""

    decision: Literal["none", "compact", "keep-warm", "let-expire", "tier"]
    tier: NotRequired[str]
    reason: str
    at: int
    warmUntil: NotRequired[int]
    #: When to ask again (ms since the epoch); absent: nothing to decide before the next request.
    nextDecisionAt: NotRequired[int]
    returnProbability: NotRequired[float]
    options: List[Dict[str, Json]]
    breakEven: Dict[str, Json]
    #: Where the return-time model came from.
    returns: str
    state: Dict[str, Json]
    #: The seq of the ``clock/decision`` event that records it.
    recorded: NotRequired[int]


class StoredSession(TypedDict):
    id: str
    createdAt: int
    events: int
    updatedAt: int
    inUse: bool
    parent: NotRequired[Dict[str, Json]]
    chainHead: NotRequired[str]


class PrefixListenerInput(TypedDict):
    rest: List[Message]
    instance: int
    turn: int


class PreStepInput(TypedDict):
    prefix: List[Message]
    system: Optional[str]
    tools: List[Tool]
    turn: int
    step: int


class SummaryInput(TypedDict):
    request: Dict[str, Json]
    provider: str
    model: str
    maxTokens: int
    digest: str
    sharedMessages: int
    prefixLen: int


class SummaryOutput(TypedDict):
    text: str
    usage: NotRequired[Usage]
    provider: NotRequired[str]
    model: NotRequired[str]
    truncated: NotRequired[bool]


class Delta(TypedDict):
    """A piece of a streamed response, for display."""

    type: Literal["text", "reasoning", "tool-call"]
    index: int
    text: NotRequired[str]
    id: NotRequired[str]
    name: NotRequired[str]
    arguments: NotRequired[str]


class ReplayAnswer(TypedDict):
    purpose: str
    id: str
    outcome: str
    response: NotRequired[Response]
    error: NotRequired[str]
    overflow: NotRequired[bool]
    summary: NotRequired[SummaryOutput]
