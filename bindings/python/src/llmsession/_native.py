"""Loading libllmsession and declaring its C entry points (include/llmsession.h) for ctypes.

Where the library is looked for, in order (docs/python.md, "Install"):

1. the file ``LLMSESSION_LIB`` names;
2. a library shipped inside the package (``llmsession/_lib/libllmsession.so``);
3. ``build/lib/libllmsession.so`` of the repository checkout the package was installed from
   (recorded at install time in ``_checkout.py``) or that contains this file;
4. the system's dynamic loader (``libllmsession.so.0.2``, ``libllmsession.so``).

The loaded library must have ABI version ``ABI_VERSION`` and minor ``ABI_MINOR`` or later.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char,
    c_char_p,
    c_int32,
    c_size_t,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any, List, Optional

#: The C ABI version this binding was written against (``LLS_ABI_VERSION``).
ABI_VERSION = 2
#: The oldest ABI minor (compatible additions) this binding loads: 2 brought ``lls_status_name``,
#: 3 the observer hook (``lls_set_observer``), 4 the finish reason of a recorded response
#: (``lls_agent_record_body_info``), 6 native compaction (``lls_agent_native_compaction_*``),
#: agent trees (``lls_agent_spawn``, ``lls_agent_finish_child``) and the cache clock
#: (``lls_agent_cache_clock``, ``lls_agent_keepalive_body``).
ABI_MINOR = 6

SEQ_NONE = 0xFFFFFFFFFFFFFFFF
CB_OK = 0
CB_PENDING = 1
CB_ERROR = 2

#: ``int32_t (*lls_callback_fn)(void *userdata, const char *in_json, size_t in_len, lls_reply *reply)``
CALLBACK_FN = CFUNCTYPE(c_int32, c_void_p, c_void_p, c_size_t, c_void_p)
#: ``void (*lls_userdata_free_fn)(void *userdata)``
FREE_FN = CFUNCTYPE(None, c_void_p)
#: ``void (*lls_observer_fn)(void *userdata, int32_t level, const char *json, size_t json_len)``
OBSERVER_FN = CFUNCTYPE(None, c_void_p, c_int32, c_void_p, c_size_t)


class RequestInfoStruct(Structure):
    """``lls_request_info``, filled by ``lls_agent_next_body``."""

    _fields_ = [
        ("instance", c_uint64),
        ("turn", c_uint64),
        ("step", c_uint64),
        ("step_seq", c_uint64),
        ("purpose", c_uint32),
        ("prefix_len", c_uint32),
        ("message_count", c_uint32),
        ("shared_messages", c_uint32),
        ("envelope_len", c_size_t),
        ("digest", c_char * 72),
    ]


class RecordedInfoStruct(Structure):
    """``lls_recorded_info``, filled by ``lls_agent_record_body_info`` and
    ``lls_agent_record_stream_info``."""

    _fields_ = [
        ("seq", c_uint64),
        ("tool_calls", c_uint32),
        ("finish_reason", c_char * 64),
    ]


def _candidates() -> List[str]:
    env = os.environ.get("LLMSESSION_LIB")
    if env:
        return [env]
    here = Path(__file__).resolve().parent
    found: List[str] = []
    shipped = here / "_lib" / "libllmsession.so"
    if shipped.exists():
        found.append(str(shipped))
    roots: List[Path] = []
    try:
        from . import _checkout  # type: ignore[attr-defined]  # written at install time

        roots.append(Path(_checkout.ROOT))
    except ImportError:
        pass
    roots.extend(here.parents)
    for root in roots:
        built = root / "build" / "lib" / "libllmsession.so"
        if (root / "include" / "llmsession.h").exists() and built.exists():
            found.append(str(built))
            break
    found += ["libllmsession.so.0.2", "libllmsession.so"]
    return found


def _load() -> "tuple[ctypes.CDLL, str]":
    tried = []
    for c in _candidates():
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            tried.append(f"{c}: {e}")
    raise ImportError(
        "llmsession: cannot load the shared library (build it with `make build-lib`, install it "
        "with `make install`, or name it with LLMSESSION_LIB). Tried:\n  " + "\n  ".join(tried)
    )


lib, library_path = _load()

P = c_void_p  # every handle, and every char * the library hands out (freed with lls_string_free)
PP = POINTER(c_void_p)
SZ = POINTER(c_size_t)
ERR = POINTER(c_void_p)
BUF = c_char_p  # an input buffer (bytes; a pointer plus the length passed beside it)
OUT = [PP, SZ, ERR]  # char **out, size_t *out_len, lls_error **err
REG = [CALLBACK_FN, c_void_p, FREE_FN, ERR]


def _def(name: str, restype: Any, argtypes: List[Any]) -> None:
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = argtypes


_def("lls_abi_version", c_uint32, [])
_def("lls_version", c_char_p, [])
loaded_abi: int = lib.lls_abi_version()
if loaded_abi != ABI_VERSION:
    raise ImportError(
        f"llmsession: {library_path} has ABI version {loaded_abi}, but this binding needs {ABI_VERSION}"
    )
try:
    _def("lls_abi_minor", c_uint32, [])
    loaded_minor: int = lib.lls_abi_minor()
except AttributeError:  # lls_abi_minor came with minor 1: a library without it is minor 0
    loaded_minor = 0
if loaded_minor < ABI_MINOR:
    raise ImportError(
        f"llmsession: {library_path} (version {lib.lls_version().decode()}) has ABI version "
        f"{loaded_abi}.{loaded_minor}, but this binding needs {ABI_VERSION}.{ABI_MINOR} or later; "
        "use a newer libllmsession"
    )

_def("lls_status_name", c_char_p, [c_int32])
_def("lls_live_handle_count", c_size_t, [])
_def("lls_live_string_count", c_size_t, [])
_def("lls_string_free", None, [P])
_def("lls_error_code", c_int32, [P])
_def("lls_error_message", c_char_p, [P])
_def("lls_error_detail", c_char_p, [P])
_def("lls_error_free", None, [P])
_def("lls_cancel_new", c_int32, [PP, ERR])
_def("lls_cancel_trip", c_int32, [P, ERR])
_def("lls_cancel_is_tripped", c_int32, [P, POINTER(c_bool), ERR])
_def("lls_cancel_free", None, [P])
_def("lls_reply_set_json", c_int32, [P, BUF, c_size_t, ERR])
_def("lls_reply_complete", c_int32, [P, BUF, c_size_t, ERR])
_def("lls_reply_fail", c_int32, [P, BUF, c_size_t, ERR])
_def("lls_callback_invoke", c_int32, [CALLBACK_FN, c_void_p, FREE_FN, BUF, c_size_t, P] + OUT)
_def("lls_render", c_int32, [BUF, c_size_t, BUF, c_size_t, c_size_t] + OUT)
_def("lls_render_with_options", c_int32, [BUF, c_size_t, BUF, c_size_t, BUF, c_size_t] + OUT)
_def("lls_parse_response", c_int32, [BUF, c_size_t, BUF, c_size_t] + OUT)
_def("lls_usage_from_provider", c_int32, [BUF, c_size_t, BUF, c_size_t] + OUT)
_def("lls_is_context_overflow", c_bool, [c_uint16, BUF, c_size_t])
_def("lls_verify_file", c_int32, [BUF, c_size_t] + OUT)
_def("lls_explain_file", c_int32, [BUF, c_size_t, BUF, c_size_t] + OUT)
_def("lls_replay_open_file", c_int32, [BUF, c_size_t, PP, ERR])
_def("lls_replay_new", c_int32, [P, PP, ERR])
_def("lls_replay_answer", c_int32, [P, BUF, c_size_t] + OUT)
_def("lls_replay_info", c_int32, [P] + OUT)
_def("lls_replay_free", None, [P])
_def("lls_stream_new", c_int32, [BUF, c_size_t, PP, ERR])
_def("lls_stream_feed", c_int32, [P, BUF, c_size_t, ERR])
_def("lls_stream_next_delta", c_int32, [P] + OUT)
_def("lls_stream_finish", c_int32, [P, c_bool] + OUT)
_def("lls_stream_body", c_int32, [P] + OUT)
_def("lls_stream_free", None, [P])
_def("lls_tool_calls_parse", c_int32, [BUF, c_size_t, PP, ERR])
_def("lls_tool_calls_count", c_int32, [P, SZ, ERR])
_def("lls_tool_calls_get", c_int32, [P, c_size_t, PP, SZ, PP, SZ, PP, SZ, ERR])
_def("lls_tool_calls_free", None, [P])

_def("lls_session_new_memory", c_int32, [BUF, c_size_t, PP, ERR])
_def("lls_session_open_file", c_int32, [BUF, c_size_t, BUF, c_size_t, PP, ERR])
_def("lls_session_open_url", c_int32, [BUF, c_size_t, BUF, c_size_t, PP, ERR])
_def("lls_set_observer", c_int32, [OBSERVER_FN, c_void_p, FREE_FN, c_int32, ERR])
_def("lls_session_open_store", c_int32, [CALLBACK_FN, c_void_p, FREE_FN, BUF, c_size_t, PP, ERR])
_def("lls_store_list_sessions", c_int32, [BUF, c_size_t, BUF, c_size_t] + OUT)
_def("lls_session_fork", c_int32, [P, BUF, c_size_t, PP, ERR])
_def("lls_session_free", None, [P])
for _n in ("load_report", "id", "info", "history", "header", "stats", "verify", "export"):
    _def(f"lls_session_{_n}", c_int32, [P] + OUT)
_def("lls_session_events", c_int32, [P, c_uint64, c_uint64] + OUT)
_def("lls_session_explain", c_int32, [P, BUF, c_size_t] + OUT)
_def("lls_session_append", c_int32, [P, BUF, c_size_t, POINTER(c_uint64), ERR])
_def("lls_session_sync", c_int32, [P, ERR])
_def("lls_session_refresh", c_int32, [P, POINTER(c_uint64), ERR])

_def("lls_agent_new", c_int32, [P, BUF, c_size_t, PP, ERR])
_def("lls_agent_spawn", c_int32, [P, BUF, c_size_t, PP, PP, ERR])
_def("lls_agent_finish_child", c_int32, [P, P, BUF, c_size_t] + OUT)
_def("lls_agent_set_options", c_int32, [P, BUF, c_size_t, ERR])
_def("lls_agent_set_policy", c_int32, [P, BUF, c_size_t, ERR])
_def("lls_agent_set_tokenizer", c_int32, [P, BUF, c_size_t, ERR])
_def("lls_agent_clear_token_counter", c_int32, [P, ERR])
for _n in ("add_prefix_listener", "add_pre_step_listener", "set_summariser", "set_token_counter"):
    _def(f"lls_agent_{_n}", c_int32, [P] + REG)
_def("lls_agent_start_turn", c_int32, [P, BUF, c_size_t, POINTER(c_uint64), ERR])
_def("lls_agent_next_request", c_int32, [P, P] + OUT)
_def("lls_agent_request_info", c_int32, [P] + OUT)
_def("lls_agent_record_response", c_int32, [P, BUF, c_size_t, POINTER(c_uint64), ERR])
_def("lls_agent_record_tool_result", c_int32, [P, BUF, c_size_t, POINTER(c_size_t), ERR])
_def("lls_agent_inject", c_int32, [P, BUF, c_size_t, POINTER(c_uint64), ERR])
_def("lls_agent_provider_error", c_int32, [P, BUF, c_size_t, P, POINTER(c_int32), ERR])
_def("lls_agent_end_turn", c_int32, [P, BUF, c_size_t, ERR])
_def("lls_agent_compact", c_int32, [P, BUF, c_size_t, P] + OUT)
for _n in ("measure", "stats", "prefix", "last_envelope"):
    _def(f"lls_agent_{_n}", c_int32, [P] + OUT)
_def("lls_agent_dispose", c_int32, [P, ERR])
_def("lls_agent_free", None, [P])
_def("lls_agent_set_renderer", c_int32, [P, BUF, c_size_t, BUF, c_size_t, ERR])
_def("lls_agent_next_body", c_int32, [P, P, PP, SZ, POINTER(RequestInfoStruct), ERR])
_def("lls_agent_record_body", c_int32, [P, BUF, c_size_t, POINTER(c_uint64), POINTER(c_uint32), ERR])
_def("lls_agent_record_stream", c_int32, [P, P, c_bool, POINTER(c_uint64), POINTER(c_uint32), ERR])
_def("lls_agent_record_body_info", c_int32, [P, BUF, c_size_t, POINTER(RecordedInfoStruct), ERR])
_def("lls_agent_record_stream_info", c_int32, [P, P, c_bool, POINTER(RecordedInfoStruct), ERR])
# Minor 6: native compaction (native_compaction.py), bound when the library has it.
if loaded_minor >= 6:
    _def("lls_agent_native_compaction_begin", c_int32, [P] + OUT)
    _def("lls_agent_native_compaction_record", c_int32, [P, BUF, c_size_t] + OUT)
    _def("lls_agent_native_compaction_fail", c_int32, [P, BUF, c_size_t] + OUT)
# Minor 6: the cache clock (clock.py).
_def("lls_agent_cache_clock", c_int32, [P, BUF, c_size_t] + OUT)
_def("lls_agent_keepalive_body", c_int32, [P, PP, SZ, POINTER(RequestInfoStruct), ERR])

version: str = lib.lls_version().decode()


def status_name(status: int) -> str:
    """The stable name of a status (``lls_status_name``): 5 -> ``"corrupt-log"``."""
    if not isinstance(status, int) or isinstance(status, bool) or not -(2**31) <= status < 2**31:
        raise TypeError(f"status_name: a status is a 32-bit integer, got {status!r}")
    name: Optional[bytes] = lib.lls_status_name(status)
    return name.decode() if name else "unknown"
