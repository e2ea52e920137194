"""The cache clock of an agent (docs/python.md, "The cache clock"; docs/caching.md): during a
pause, :meth:`CacheClock.cache_clock` says what to do about the provider's cache
(``lls_agent_cache_clock``), :meth:`CacheClock.keepalive_body` builds the keep-warm request it may
decide (``lls_agent_keepalive_body``; record its answer with :meth:`Agent.record_body`), and
:meth:`CacheClock.compact_idle` runs the compaction it may decide (``lls_agent_compact`` with
``{"trigger": "idle"}``). :class:`Agent` has these methods."""

from __future__ import annotations

import json
from ctypes import byref, c_size_t, c_void_p
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union, cast

from . import _native as N
from ._runtime import call, call_json, call_out, dumps, take_bytes
from .types import ClockDecision, CompactionOutcome

if TYPE_CHECKING:
    from .agent import Body
    from .cancel import Cancel

#: The decisions of the cache clock (``cache_clock(...)["decision"]``).
DECISIONS = ("none", "compact", "keep-warm", "let-expire", "tier")


class CacheClock:
    """The cache clock's methods of :class:`Agent`."""

    ptr: Any

    def cache_clock(self, options: Optional[Union[Mapping[str, Any], str]] = None) -> ClockDecision:
        """What to do now about the provider's cache, from the session's log. ``options`` (all
        optional): ``now`` (ms since the epoch), ``prices``, ``cacheRules``, ``returnModel``
        (``gapsMs``, ``weights``, ``neverReturns``, ``learn``, ``priorWeight``), ``marginMs``,
        ``tierBilling``, ``compaction`` (``enabled``, ``minContextTokens``, ``summaryRatio``),
        ``record``, ``keepWarmBudget`` (the most one pause may stake in keep-warm requests, as a
        share of what the session's requests have cost so far; default 0.05), ``keepWarmTiers``
        (default true: a keep-warm request may be sent at a longer tier than the one in force).
        An action decision is recorded in the log once per use of the cache. Bad
        options raise :class:`InvalidInputError` naming the field."""
        b = b"" if options is None else dumps(options)
        return cast(ClockDecision, call_json(N.lib.lls_agent_cache_clock, self.ptr, b or None, len(b)))

    def keepalive_body(self) -> "Body":
        """The keep-warm request the clock decided (``keep-warm``) as the provider body: the last
        conversation request again, its output limit at the provider's minimum
        (``info["purpose"]`` is ``"keepalive"``); when the decision named a longer ``tier``, its
        cache marks carry that tier's TTL. Send it and record the answer with
        :meth:`Agent.record_body`: it never enters the history."""
        from .agent import Body, _info

        out = c_void_p()
        n = c_size_t()
        info = N.RequestInfoStruct()
        body = call(N.lib.lls_agent_keepalive_body, self.ptr, byref(out), byref(n), byref(info), on_ok=lambda: take_bytes(out, n))
        return Body(body or b"", _info(info))

    def compact_idle(self, cancel: Optional["Cancel"] = None) -> CompactionOutcome:
        """The compaction the clock decided (``compact``): the cache-reusing compaction, logged
        with trigger ``idle``; it calls the summariser."""
        from .agent import _cancel_ptr

        b = dumps({"trigger": "idle"})
        return cast(CompactionOutcome, json.loads(call_out(N.lib.lls_agent_compact, self.ptr, b, len(b), _cancel_ptr(cancel)) or b"null"))
