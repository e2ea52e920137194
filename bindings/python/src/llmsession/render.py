"""Renderers and provider responses: envelopes to provider bodies, bodies to responses."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union, cast

from . import _native as N
from ._runtime import call_json, call_out, dumps, opt, text
from .types import Response, Usage

JsonText = Union[bytes, str, Mapping[str, Any]]


def render(renderer: str, envelope: JsonText, prefix_len: int = 0) -> str:
    """Renders an envelope (bytes / JSON text / dict) for ``"openai"``, ``"openai-responses"``,
    ``"anthropic"``, ``"gemini"`` or ``"gemini-interactions"``."""
    r = text(renderer, "render")
    e = dumps(envelope)
    return (call_out(N.lib.lls_render, r, len(r), e, len(e), prefix_len) or b"").decode("utf-8")


def render_with_options(renderer: str, envelope: JsonText, options: Optional[Mapping[str, Any]] = None) -> str:
    """As :func:`render`, with ``{"prefixLen"?, "promptCacheKey"?, "promptCacheRetention"?, "cacheTtl"?,
    "promptCacheOptions"?, "promptCacheBreakpoints"?, "cacheDiagnostics"?}``."""
    r = text(renderer, "render_with_options")
    e = dumps(envelope)
    o, n = opt(options)
    return (call_out(N.lib.lls_render_with_options, r, len(r), e, len(e), o, n) or b"").decode("utf-8")


def parse_response(format: str, body: JsonText) -> Response:
    """A non-streamed provider response body as ``{"message", "usage"?, "finishReason"?}``."""
    f = text(format, "parse_response")
    b = dumps(body)
    return cast(Response, call_json(N.lib.lls_parse_response, f, len(f), b, len(b)))


def usage_from_provider(provider: str, usage: JsonText) -> Usage:
    """A provider's usage object as a Usage (``"openai"``, ``"llama.cpp"``, ``"deepseek"``, ...)."""
    p = text(provider, "usage_from_provider")
    u = dumps(usage)
    return cast(Usage, call_json(N.lib.lls_usage_from_provider, p, len(p), u, len(u)))


def is_context_overflow(status: int, body: Union[bytes, str]) -> bool:
    """Whether a provider error (HTTP status, body) says the prompt did not fit the context."""
    if not isinstance(status, int) or not 0 <= status <= 65535:
        raise ValueError(f"is_context_overflow: status must be an HTTP status code, got {status!r}")
    b = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    return bool(N.lib.lls_is_context_overflow(status, b, len(b)))
