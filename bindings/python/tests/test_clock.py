"""The cache clock (docs/python.md, "The cache clock"): what it decides from the log, the
keep-warm request it builds and whose answer goes through record_body, its options' errors."""

from __future__ import annotations

import json

import pytest

import llmsession as lls

PRICES = {"anthropic": {"input": 3, "cachedInput": 0.3, "cacheWrite": {"5m": 3.75, "1h": 6}, "output": 15}}
REPLY = json.dumps(
    {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "It reads the forecast."}],
        "usage": {"input_tokens": 40, "output_tokens": 8, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 30000},
    }
)


def after_one_turn(s: lls.Session) -> lls.Agent:
    a = lls.Agent(s, {"config": {"provider": "anthropic", "model": "claude-sonnet-4-5"}, "system": "You are a coding agent.", "checkRequests": True})
    a.set_renderer("anthropic")
    a.start_turn("What does the weather module do?")
    a.next_body()
    a.record_body(REPLY)
    a.end_turn("completed")
    return a


def test_the_clock_keeps_warm_through_the_record_path() -> None:
    with lls.Session.memory() as s, after_one_turn(s) as a:
        d = a.cache_clock({"prices": PRICES})
        assert d["state"]["tier"] == "5m" and d["state"]["ttlMs"] == 300000
        assert d["decision"] == "none" and d["nextDecisionAt"] == d["state"]["lastRequestAt"] + 290000
        now = d["state"]["lastRequestAt"] + 292000
        d = a.cache_clock({"prices": PRICES, "now": now, "returnModel": {"gapsMs": [1200000], "neverReturns": 0}})
        assert d["decision"] == "keep-warm", d["reason"]
        assert d["tier"] == "1h", d["reason"]  # one keep-warm request at the hour tier bridges it
        assert d["recorded"] > 0
        body = a.keepalive_body()
        assert body.info["purpose"] == "keepalive"
        assert json.loads(body.body)["max_tokens"] == 1
        assert b'"ttl":"1h"' in body.body
        assert a.record_body(REPLY).tool_call_count == 0
        v = s.verify()
        assert (v["requests"], v["keepalives"], v["decisions"]) == (1, 1, 1)


def test_bad_clock_options_name_the_field() -> None:
    with lls.Session.memory() as s, after_one_turn(s) as a:
        with pytest.raises(lls.InvalidInputError) as e:
            a.cache_clock({"marginMs": -1})
        assert e.value.detail["field"] == "options.marginMs"
        with pytest.raises(lls.OutOfOrderError, match="has not decided to compact"):
            a.compact_idle()
