"""Provider-native compaction (docs/python.md, "Native compaction"; docs/compaction.md).

Anthropic's on-demand compaction and OpenAI's ``POST /responses/compact``, as requests the host
sends (now or in the background, while the conversation goes on) and whose answers the library
records. Threshold compaction needs no call of its own: with a policy whose ``mechanism`` is
``"native"`` or ``"auto"`` the conversation requests carry the provider's setting, and
``record_body`` / ``record_response`` record a compaction block the answer holds.

The methods here are :class:`~llmsession.Agent`'s (a mixin); they need ABI 2 minor 6.
"""

from __future__ import annotations

from typing import Any, Union, cast

from . import _native as N
from ._runtime import call_json, dumps
from .errors import LlmSessionError, Status
from .types import NativeOutcome, NativeRequest


def _needs_minor_6(what: str) -> None:
    if N.loaded_minor < 6:
        raise LlmSessionError(
            Status.INVALID_ARGUMENT,
            f"{what}: the loaded library has ABI minor {N.loaded_minor}; native compaction needs 6",
            {},
        )


class NativeCompaction:
    """Agent methods for native compaction (mixed into :class:`~llmsession.Agent`)."""

    ptr: Any

    def begin_native_compaction(self) -> NativeRequest:
        """Builds a native compaction request for the agent's route over the whole history and
        logs its start: ``{"format", "endpoint", "betas", "envelope", "body", "digest", "span",
        "seqs", "messageCount", "sharedMessages"}``. POST ``body`` (JSON text) to ``endpoint``
        with the ``anthropic-beta`` flags in ``betas``; then :meth:`record_native_compaction` or
        :meth:`fail_native_compaction`."""
        _needs_minor_6("begin_native_compaction")
        return cast(NativeRequest, call_json(N.lib.lls_agent_native_compaction_begin, self.ptr))

    def record_native_compaction(self, body: Union[str, bytes, Any]) -> NativeOutcome:
        """Records the provider's raw answer (text, bytes, or the parsed object) to the native
        compaction request in flight: ``{"outcome": "landed" | "failed", "format", "span",
        "seqs", "error"?, "stopReason"?}``. An answer without the compaction block is a failed
        attempt, logged."""
        _needs_minor_6("record_native_compaction")
        if isinstance(body, str):
            b = body.encode()
        elif isinstance(body, (bytes, bytearray)):
            b = bytes(body)
        else:
            b = dumps(body)
        return cast(NativeOutcome, call_json(N.lib.lls_agent_native_compaction_record, self.ptr, b, len(b)))

    def fail_native_compaction(self, why: str = "") -> NativeOutcome:
        """Reports that the native compaction request in flight failed (a timeout, a transport
        error); the history stays whole."""
        _needs_minor_6("fail_native_compaction")
        b = why.encode()
        return cast(NativeOutcome, call_json(N.lib.lls_agent_native_compaction_fail, self.ptr, b, len(b)))
