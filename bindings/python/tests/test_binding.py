"""The binding's API: loading, sessions and the turn loop, resume, verify, errors and misuse."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import llmsession as lls
from conftest import CONFIG, OPENAI_REPLY, assistant


def test_library_is_loaded_and_its_abi_checked() -> None:
    assert lls.abi_version == lls.ABI_VERSION == 2
    assert lls.abi_minor >= lls.ABI_MINOR
    assert lls.library_version.count(".") == 2
    assert Path(lls.library_path).name.startswith("libllmsession")


def test_every_status_has_its_class_named_as_the_library_names_it() -> None:
    for status, cls in lls.ERROR_CLASSES.items():
        e = cls(status, "m")
        assert isinstance(e, lls.LlmSessionError) and e.status == status
        assert e.kind == lls.status_name(status) != "unknown"
    assert lls.status_name(12345) == "unknown"
    with pytest.raises(TypeError):
        lls.status_name("5")  # type: ignore[arg-type]


def test_one_turn_with_the_provider_body_then_resume_and_verify(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    opts = {"config": {"provider": "llama.cpp", "model": "smollm2"}, "system": "Be brief."}
    with lls.Session.open_file(log) as s, lls.Agent(s, opts) as a:
        a.set_renderer("openai")
        assert a.start_turn("Hi!") == 1
        body = a.next_body()
        assert json.loads(body.body)["messages"][-1] == {"role": "user", "content": "Hi!"}
        assert body.info["purpose"] == "conversation" and body.info["digest"].startswith("sha256:")
        assert a.last_envelope() and json.loads(a.last_envelope())["messages"][0]["role"] == "user"
        rec = a.record_body(OPENAI_REPLY)
        assert rec.tool_calls == [] and rec.seq > 0 and rec.finish_reason == "stop"
        a.end_turn()
        assert s.verify()["requests"] == 1
    with lls.Session.open_file(log) as s, lls.Agent(s, opts) as a:  # resumed: a new instance
        a.start_turn("Again")
        r = a.next_request()
        assert r.info["instance"] == 2 and r.info["sharedMessages"] == 1
        assert [m["role"] for m in r.envelope["messages"]] == ["user", "assistant", "user"]
        a.record_response(assistant("ok"))
        a.end_turn()
        assert s.verify()["requests"] == 2
        assert s.load_report()["cutRecords"] == 0
        assert s.id and s.info()["id"] == s.id
        assert s.stats()["turns"] == 2
    assert lls.verify_file(log)["requests"] == 2
    assert len(lls.explain_file(log)["requests"]) == 2


def test_session_events_history_append_fork_and_export(tmp_path: Path) -> None:
    with lls.Session.memory({"id": "x"}) as s:
        seq = s.append({"type": "host/note", "data": {"n": 1}})
        assert s.events()[seq]["type"] == "host/note"
        assert s.events(seq, seq + 1)[0]["data"] == {"n": 1}
        assert s.history() == [] and s.header() is None
        with s.fork({"id": "child"}) as c:
            assert c.id == "child" and len(c.events()) == len(s.events())
        out = tmp_path / "x.jsonl"
        out.write_text(s.export_jsonl())
        with lls.Session.open_file(out, {"readOnly": True}) as ro:
            assert ro.id == "x"
            with pytest.raises(lls.ReadOnlyError):
                ro.append({"type": "host/note", "data": {}})


def test_bad_json_wrong_types_and_out_of_order_calls_are_errors_that_change_nothing() -> None:
    with lls.Session.memory() as s:
        with pytest.raises(lls.MalformedJsonError) as e:
            lls.Agent(s, "{not json")
        assert e.value.kind == "malformed-json" and e.value.detail["line"] == 1 and "column" in e.value.detail
        with pytest.raises(TypeError):
            lls.Agent(None, CONFIG)  # type: ignore[arg-type]
        with pytest.raises(lls.InvalidInputError) as ie:
            lls.Agent(s, {"config": 5})
        assert ie.value.field == "config" and isinstance(ie.value, ValueError)
        with lls.Agent(s, CONFIG) as a:
            with pytest.raises(lls.OutOfOrderError):
                a.next_request()
            with pytest.raises(lls.InvalidInputError) as ie:
                a.start_turn(5)  # type: ignore[arg-type]
            assert ie.value.field == "message"
            assert len(s.events()) == 0
            with pytest.raises(lls.BusyError):
                lls.Agent(s, CONFIG)
            with pytest.raises(lls.InvalidPolicyError):
                a.set_policy({"contextWindow": 0})
            with pytest.raises(TypeError):
                a.next_request(cancel="yes")  # type: ignore[arg-type]
            with pytest.raises(lls.OutOfOrderError):
                a.next_body()  # no renderer
            with pytest.raises(lls.InvalidInputError):
                a.set_renderer("nope")


def test_a_second_writer_is_locked_out(tmp_path: Path) -> None:
    log = tmp_path / "l.jsonl"
    with lls.Session.open_file(log):
        with pytest.raises(lls.LockedError) as e:
            lls.Session.open_file(log)
        assert e.value.kind == "locked"
    lls.Session.open_file(log).close()  # the lock goes with close


def test_closed_and_disposed_handles_are_refused() -> None:
    s = lls.Session.memory()
    a = lls.Agent(s, CONFIG)
    a.dispose()
    with pytest.raises(lls.DisposedError):
        a.start_turn("x")
    a.close()
    a.close()  # idempotent
    with pytest.raises(lls.InvalidHandleError, match="agent was closed"):
        a.start_turn("x")
    s.close()
    assert s.closed
    with pytest.raises(lls.InvalidHandleError, match="session was closed"):
        s.events()
    with pytest.raises(lls.InvalidHandleError):
        lls.Agent(s, CONFIG)


def test_unclosed_objects_are_freed_by_the_garbage_collector() -> None:
    import gc

    for _ in range(20):
        s = lls.Session.memory()
        a = lls.Agent(s, CONFIG)
        a.add_prefix_listener(lambda i: i["rest"])
        del a, s
    gc.collect()
    assert lls.live_handle_count() == 0


def test_cancel_token_from_another_thread() -> None:
    with lls.Cancel() as c:
        assert not c.tripped
        t = threading.Thread(target=c.trip)
        t.start()
        t.join()
        assert c.tripped
        with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
            a.start_turn("hi")
            with pytest.raises(lls.CancelledError) as e:
                a.next_request(c)
            assert e.value.kind == "cancelled"


def test_provider_helpers() -> None:
    parsed = lls.parse_response("openai", OPENAI_REPLY)
    assert parsed["message"]["content"] == [{"type": "text", "text": "Hello!"}]
    assert parsed["usage"]["inputTokens"] == 14 and parsed["finishReason"] == "stop"
    assert lls.usage_from_provider("openai", {"prompt_tokens": 10, "completion_tokens": 2})["outputTokens"] == 2
    assert lls.is_context_overflow(400, '{"error":{"message":"maximum context length exceeded","code":"context_length_exceeded"}}')
    assert not lls.is_context_overflow(500, "boom")
    with pytest.raises(ValueError):
        lls.is_context_overflow(70000, "")
    env = {"provider": "p", "model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "purpose": "conversation"}
    assert json.loads(lls.render("openai", env))["messages"] == [{"role": "user", "content": "hi"}]
    assert "prompt_cache_key" in lls.render_with_options("openai", env, {"promptCacheKey": "k"})
    with pytest.raises(lls.InvalidInputError):
        lls.render_with_options("openai", env, {"nope": 1})
    # The Gemini Interactions API and OpenAI's explicit cache controls (issue 29).
    assert json.loads(lls.render("gemini-interactions", env))["input"] == [
        {"type": "user_input", "content": [{"type": "text", "text": "hi"}]}
    ]
    marked = json.loads(lls.render_with_options("openai", env, {"promptCacheBreakpoints": True, "promptCacheOptions": {"mode": "explicit"}}))
    assert marked["messages"][0]["content"][0]["prompt_cache_breakpoint"] == {"mode": "explicit"}
    assert marked["prompt_cache_options"] == {"mode": "explicit"}
    with pytest.raises(lls.InvalidInputError, match="is an OpenAI cache control"):
        lls.render_with_options("anthropic", env, {"promptCacheBreakpoints": True})
    with pytest.raises(lls.InvalidInputError):
        lls.parse_response("openai", {"no": "choices"})


def test_replay_answers_the_recorded_request_and_names_a_divergence() -> None:
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.start_turn("hi")
        req = a.next_request()
        a.record_response(assistant("recorded"))
        a.end_turn()
        with lls.Replay.from_session(s) as r:
            ans = r.answer(req.bytes)
            assert ans["response"]["message"]["content"][0]["text"] == "recorded"
            assert r.info()["answered"] == 1
            with pytest.raises(lls.ReconstructionError) as e:
                r.answer(req.bytes.replace(b'"hi"', b'"ho"'))
            assert e.value.detail.get("replay") is True


def test_host_store_keeps_the_log_and_reopens_from_it() -> None:
    records: list = []
    requests: list = []

    def store(req: dict) -> object:
        requests.append(req["op"])
        if req["op"] == "load":
            return {"records": list(records)}
        if req["op"] == "append":
            if req.get("header"):
                records.append(req["header"])
            records.extend(req["records"])
        return True

    with lls.Session.open_store(store) as s, lls.Agent(s, CONFIG) as a:
        a.start_turn("hi")
        a.next_request()
        a.record_response(assistant("yo"))
        a.end_turn()
        n = len(s.events())
    assert "load" in requests and "append" in requests
    assert len(records) == n + 1  # the header record and every event
    with lls.Session.open_store(store) as s2:
        assert s2.verify()["requests"] == 1


def test_a_failing_host_store_is_a_storage_error_and_changes_nothing() -> None:
    fail = {"on": False}

    def store(req: dict) -> object:
        if req["op"] == "load":
            return {"records": []}
        if req["op"] == "append" and fail["on"]:
            raise lls.CallbackError("disk full")
        return True

    with lls.Session.open_store(store) as s:
        s.append({"type": "host/note", "data": {}})
        fail["on"] = True
        before = len(s.events())
        with pytest.raises(lls.StorageError, match="disk full") as e:
            s.append({"type": "host/note", "data": {}})
        assert e.value.detail.get("op") == "append"
        assert len(s.events()) == before


def test_a_large_provider_body_is_handed_over_and_given_back() -> None:
    big = "lorem ipsum " * 20000  # a body of about 240 KB: the library's own buffer, not a copy
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.set_renderer("anthropic")
        a.start_turn(big)
        body = a.next_body()
        assert len(body.body) > 200_000 and big in body.json
        assert lls.live_string_count() == 0  # copied into Python bytes and freed at once
        env = a.last_envelope()
        assert len(env) == body.info["bytes"]
        assert lls.render("anthropic", env, body.info["prefixLen"]).encode() == body.body


def test_a_host_store_may_answer_from_another_thread() -> None:
    import concurrent.futures

    records: list = []

    def answer(req: dict) -> object:
        if req["op"] == "load":
            return {"records": list(records)}
        if req["op"] == "append":
            records.extend(([req["header"]] if req.get("header") else []) + req["records"])
        return True

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        with lls.Session.open_store(lambda req: ex.submit(answer, req)) as s:
            s.append({"type": "host/note", "data": {"n": 1}})
            s.sync()
            assert len(records) == 2 and s.verify()["events"] == 1


def test_record_body_gives_the_normalised_finish_reason_which_is_not_logged() -> None:
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.set_renderer("anthropic")
        a.start_turn("Cherche l'herbe")
        for stop, want in [
            ("pause_turn", "pause-turn"),
            ("refusal", "refusal"),
            ("model_context_window_exceeded", "context-overflow"),
            (None, None),
            ("end_turn", "stop"),
        ]:
            a.next_body()
            body = {"content": [{"type": "text", "text": "Verte 🌱"}], "stop_reason": stop}
            rec = a.record_body(json.dumps(body))
            assert rec == lls.Recorded(rec.seq, 0, want), stop
        a.end_turn()
        assert "pause-turn" not in json.dumps(s.events())
    # OpenAI chat: a refusal, and n > 1 refused.
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.set_renderer("openai")
        a.start_turn("?")
        a.next_body()
        two = {"choices": [{"index": i, "message": {"role": "assistant", "content": "x"}} for i in (0, 1)]}
        with pytest.raises(lls.InvalidInputError) as e:
            a.record_body(json.dumps(two))
        assert e.value.detail["choices"] == 2
        refusal = {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "Non."}, "finish_reason": "stop"}]}
        rec = a.record_body(json.dumps(refusal))
        assert rec.finish_reason == "refusal"
        assert s.history()[-1]["content"] == [{"type": "text", "text": "Non.", "refusal": True}]
