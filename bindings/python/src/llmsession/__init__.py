"""llmsession for Python: the append-only log of an LLM agent session, and every provider
request built from it so prompt caches keep hitting (a ctypes binding of libllmsession's C ABI).

See docs/python.md in the repository: install, one turn, resume, verify, callbacks, threads,
asyncio, errors.
"""

from __future__ import annotations

from . import _native
from ._native import ABI_MINOR, ABI_VERSION, status_name
from ._runtime import PendingReply, invoke_callback, registered_callback_count
from .agent import Agent, Body, Recorded, Request, compaction_outcome, user_message
from .aio import AsyncAgent
from .cancel import Cancel
from .clock import DECISIONS
from .errors import *  # noqa: F401,F403  (LlmSessionError, its subclasses, CallbackError, Status)
from .errors import ERROR_CLASSES, CallbackError, LlmSessionError, Status
from .observe import LEVELS, Observation, live_observer_count, log_to, observing, set_observer
from .render import is_context_overflow, parse_response, render, render_with_options, usage_from_provider
from .replay import Replay
from .session import Session, explain_file, list_sessions, verify_file
from .sdk import sdk_kwargs
from .stream import Stream
from .tools import ToolCall, tool_calls
from .tree import DEFAULT_PLACEHOLDER, wake

__version__ = "0.2.0"

#: The loaded library's version string (``lls_version``).
library_version: str = _native.version
#: The file the library was loaded from.
library_path: str = _native.library_path
#: The loaded library's ABI version and minor.
abi_version: int = _native.loaded_abi
abi_minor: int = _native.loaded_minor


def live_handle_count() -> int:
    """Live library handles (errors, tokens, replies awaiting an answer, sessions, ...)."""
    return int(_native.lib.lls_live_handle_count())


def live_string_count() -> int:
    """Library strings handed out and not yet freed."""
    return int(_native.lib.lls_live_string_count())


__all__ = [
    "LEVELS",
    "Observation",
    "live_observer_count",
    "log_to",
    "observing",
    "set_observer",
    "ABI_MINOR",
    "DEFAULT_PLACEHOLDER",
    "wake",
    "ABI_VERSION",
    "Agent",
    "AsyncAgent",
    "Body",
    "CallbackError",
    "Cancel",
    "DECISIONS",
    "ERROR_CLASSES",
    "LlmSessionError",
    "PendingReply",
    "Recorded",
    "Replay",
    "Request",
    "Session",
    "Status",
    "Stream",
    "ToolCall",
    "abi_minor",
    "abi_version",
    "compaction_outcome",
    "explain_file",
    "invoke_callback",
    "is_context_overflow",
    "library_path",
    "library_version",
    "list_sessions",
    "live_handle_count",
    "live_string_count",
    "parse_response",
    "registered_callback_count",
    "render",
    "render_with_options",
    "sdk_kwargs",
    "status_name",
    "tool_calls",
    "usage_from_provider",
    "user_message",
    "verify_file",
] + [c.__name__ for c in ERROR_CLASSES.values()]
