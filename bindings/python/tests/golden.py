"""Golden transcripts for the Python scenario driver (docs/scenarios.md, "Golden transcripts"):
masking a run's transcript as the Rust runner masks it, and comparing it with the checked-in
tests/scenarios/golden/<stem>.json (the first difference, by JSON Pointer)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

TIME, CHAIN, DIR = "<time>", "<chain>", "<dir>"
_ABSENT = object()

# Wording the C ABI adds around a failing host callback's message, removed from every string.
CALLBACK_WRAPPERS = ("prefix listener callback: ", "summariser callback: ", "host callback failed: ")
# Pending mode only (docs/scenarios.md, "What a binding normalises"): a fake that disposes the
# instance or trips the cancel token and then answers a pending reply finds the library's wait
# ended by it, and the message names that wait rather than the phase.
_DISPOSED = re.compile(
    r"the agent instance was disposed(?: during session prefix composition)?"
    r"(?: \(cancelled while waiting for a host callback's pending reply\))?"
)
PENDING_CANCELLED = "cancelled while waiting for a host callback's pending reply"
# Differences in substance of pending mode from the golden transcripts (as Node's, reported, not
# masked): only the ops before ``from_op`` are compared, and the rest must still differ.
KNOWN_PENDING_DIFFERENCES = {
    "dispose_in_callbacks.json": (
        16,
        "a token counter that disposes the instance and answers through a pending reply ends the "
        "measurement at once (the disposal ends the wait), so no compaction starts; answered at "
        "once, the count is used and the disposal is noticed at the summarisation",
    ),
}


def expand(v: Any) -> Any:
    """Expands ``{"$repeat": s, "times": n}`` anywhere in ``v`` into ``s * n``."""
    if isinstance(v, list):
        return [expand(x) for x in v]
    if isinstance(v, dict):
        if "$repeat" in v:
            return str(v["$repeat"]) * int(v["times"])
        return {k: expand(x) for k, x in v.items()}
    return v


def masked_record(record: Dict[str, Any]) -> Dict[str, Any]:
    """A stored record with its top-level times and chained digest masked."""
    r = dict(record)
    for k, token in (("time", TIME), ("createdAt", TIME), ("chain", CHAIN)):
        if k in r:
            r[k] = token
    return r


def mask_strings(v: Any, tmp: str) -> Any:
    """Every string with the scratch directory, sidecar times and callback wording masked."""
    if isinstance(v, str):
        s = re.sub(r"\.cut-[0-9]+", f".cut-{TIME}", v.replace(tmp, DIR))
        for phrase in CALLBACK_WRAPPERS:
            s = s.replace(phrase, "")
        return s
    if isinstance(v, list):
        return [mask_strings(x, tmp) for x in v]
    if isinstance(v, dict):
        return {k: mask_strings(x, tmp) for k, x in v.items()}
    return v


def _same_wording(want: str, got: str, mode: str) -> bool:
    if want == got:
        return True
    if mode != "pending":
        return False
    norm = "the agent instance was disposed"
    if _DISPOSED.sub(norm, want) == _DISPOSED.sub(norm, got):
        return True
    return got == PENDING_CANCELLED and want.endswith(" was cancelled")


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


def first_difference(want: Any, got: Any, mode: str = "sync", at: str = "") -> Optional[Tuple[str, Any, Any]]:
    """``(pointer, want, got)`` of the first difference (depth first, object keys sorted), or None."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            d = first_difference(want.get(k, _ABSENT), got.get(k, _ABSENT), mode, f"{at}/{k.replace('~', '~0').replace('/', '~1')}")
            if d:
                return d
        return None
    if isinstance(want, list) and isinstance(got, list):
        for i in range(max(len(want), len(got))):
            d = first_difference(want[i] if i < len(want) else _ABSENT, got[i] if i < len(got) else _ABSENT, mode, f"{at}/{i}")
            if d:
                return d
        return None
    if isinstance(want, str) and isinstance(got, str) and _same_wording(want, got, mode):
        return None
    if _kind(want) != _kind(got) or isinstance(want, (dict, list)) or want != got:
        return (at, want, got)
    return None


def _shown(v: Any) -> str:
    if v is _ABSENT:
        return "(nothing)"
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= 400 else f"{s[:400]}... ({len(s)} characters)"


def _place(transcript: Dict[str, Any], pointer: str) -> str:
    parts = pointer.split("/")
    if len(parts) > 2 and parts[1] == "ops":
        ops = transcript.get("ops", [])
        i = int(parts[2])
        return f"op {i} ({ops[i].get('op', '?') if i < len(ops) else '?'})"
    if len(parts) > 2 and parts[1] == "final":
        return f"the final {parts[2]}"
    return "the transcript"


def golden_path(scenario: Path) -> Path:
    return scenario.parent / "golden" / f"{scenario.stem}.json"


def settle(scenario: Path, transcript: Dict[str, Any], out_dir: Path, mode: str) -> None:
    """Writes the transcript to ``out_dir`` and compares it with the golden file; raises
    AssertionError naming the first difference."""
    out_dir.mkdir(parents=True, exist_ok=True)
    mine = out_dir / f"{scenario.stem}.json"
    mine.write_text(json.dumps(transcript, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    gp = golden_path(scenario)
    if not gp.exists():
        raise AssertionError(f"the golden transcript {gp} is missing\n  this run's transcript: {mine}")
    want = expand(json.loads(gp.read_text(encoding="utf-8")))
    d = first_difference(want, transcript, mode)
    known = KNOWN_PENDING_DIFFERENCES.get(scenario.name) if mode == "pending" else None
    if known:
        if not d:
            raise AssertionError(f"{gp}: the known difference ({known[1]}) is gone: remove it from golden.py")
        d = first_difference(want["ops"][: known[0]], transcript["ops"][: known[0]], mode, "/ops")
    if d:
        ptr, w, g = d
        raise AssertionError(
            f"the transcript differs from {gp} at {_place(want, ptr)}, {ptr}\n"
            f"  expected: {_shown(w)}\n  got:      {_shown(g)}\n  this run's transcript: {mine}"
        )
