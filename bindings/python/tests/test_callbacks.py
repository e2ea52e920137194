"""Host callbacks: answers at once and pending replies completed from other threads, failures on
purpose and by accident, cancellation and disposal while a reply is pending, invoke_callback."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, List

import pytest

import llmsession as lls
from conftest import CONFIG, assistant

NOTE = {"role": "user", "content": [{"type": "text", "text": "house rules"}]}
POLICY = {"contextWindow": 2000, "threshold": 0.5, "retainedTokens": 50, "summaryMaxTokens": 100}


def long_turns(a: lls.Agent, n: int) -> None:
    for i in range(n):
        a.start_turn(f"question {i} " + "word " * 200)
        a.next_request()
        a.record_response(assistant("answer " * 200))
        a.end_turn()


def test_a_prefix_listener_composes_the_session_prefix() -> None:
    seen: List[Any] = []
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.add_prefix_listener(lambda i: (seen.append(i), [NOTE] + i["rest"])[1])
        a.add_pre_step_listener(lambda i: seen.append(("pre", i["step"])))
        a.start_turn("hi")
        r = a.next_request()
        assert r.info["prefixLen"] == 1 and r.envelope["messages"][0] == NOTE
        assert seen[0] == {"rest": [], "instance": 1, "turn": 1} and seen[1] == ("pre", 1)
        assert a.prefix() == [NOTE]


def test_a_pending_reply_completed_from_another_thread() -> None:
    def later(i: Any) -> lls.PendingReply:
        p = lls.PendingReply()
        threading.Timer(0.02, lambda: p.resolve([NOTE] + i["rest"])).start()
        return p

    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.add_prefix_listener(later)
        a.start_turn("hi")
        assert a.next_request().info["prefixLen"] == 1


def test_an_executor_future_is_a_pending_reply_and_so_is_a_failed_one() -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as ex, lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.add_prefix_listener(lambda i: ex.submit(lambda: i["rest"]))
        a.set_summariser(lambda i: ex.submit(lambda: "the summary"))
        a.set_policy(POLICY)
        long_turns(a, 3)
        assert s.stats()["compactions"] >= 1
        a.set_summariser(lambda i: ex.submit(lambda: (_ for _ in ()).throw(lls.CallbackError("summariser down"))))
        a.start_turn("more")
        with pytest.raises(lls.SummariserError, match="summariser down") as e:
            a.compact()
        assert lls.compaction_outcome(e.value)["outcome"] == "failed"


def test_a_callback_error_fails_the_call_with_the_library_error_and_its_message() -> None:
    def fail(_i: Any) -> Any:
        raise lls.CallbackError("no prefix today")

    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.add_prefix_listener(fail)
        a.start_turn("hi")
        with pytest.raises(lls.ListenerError, match="no prefix today") as e:
            a.next_request()
        assert e.value.detail["callback"] == "failed" and e.value.detail["listener"] == 0
        assert s.events()[-1]["type"] == "turn/end" and s.events()[-1]["data"]["reason"] == "error"


def test_any_other_exception_in_a_callback_is_reraised_as_it_is() -> None:
    class Boom(Exception):
        pass

    def boom(_i: Any) -> Any:
        raise Boom("bug in the listener")

    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.add_prefix_listener(boom)
        a.start_turn("hi")
        with pytest.raises(Boom, match="bug in the listener"):
            a.next_request()
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.add_prefix_listener(lambda i: {1, 2})  # not JSON: the encoder's TypeError
        a.start_turn("hi")
        with pytest.raises(TypeError):
            a.next_request()


def test_an_unusable_answer_is_a_listener_error() -> None:
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.add_prefix_listener(lambda i: "not messages")
        a.start_turn("hi")
        with pytest.raises(lls.ListenerError):
            a.next_request()


def test_cancel_while_a_reply_is_pending_then_the_late_answer_is_discarded() -> None:
    pending: List[lls.PendingReply] = []

    def hold(_i: Any) -> lls.PendingReply:
        pending.append(lls.PendingReply())
        return pending[-1]

    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a, lls.Cancel() as c:
        a.add_prefix_listener(hold)
        a.start_turn("hi")
        threading.Timer(0.05, c.trip).start()
        with pytest.raises(lls.CancelledError, match="pending reply"):
            a.next_request(c)
        pending[0].resolve([])  # must still be answered once; accepted and discarded
        assert s.events()[-1]["data"]["reason"] == "aborted"


def test_dispose_from_inside_a_listener_fails_the_request_with_disposed() -> None:
    with lls.Session.memory() as s:
        a = lls.Agent(s, CONFIG)
        a.add_prefix_listener(lambda i: (a.dispose(), i["rest"])[1])
        a.start_turn("hi")
        with pytest.raises(lls.DisposedError):
            a.next_request()
        a.close()
        assert s.events()[-1]["data"]["reason"] == "disposed"


def test_dispose_from_another_thread_ends_a_pending_wait() -> None:
    with lls.Session.memory() as s:
        a = lls.Agent(s, CONFIG)
        held: List[lls.PendingReply] = []
        a.add_prefix_listener(lambda i: held.append(lls.PendingReply()) or held[-1])
        a.start_turn("hi")
        t = threading.Timer(0.05, a.dispose)
        t.start()
        with pytest.raises(lls.DisposedError):
            a.next_request()
        t.join()
        held[0].resolve([])
        a.close()


def test_a_callback_may_not_drive_its_own_agent() -> None:
    errors: List[BaseException] = []
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:

        def reenter(i: Any) -> Any:
            try:
                a.stats()
            except lls.OutOfOrderError as e:
                errors.append(e)
            s.append({"type": "host/note", "data": {}})  # reading and appending to the session is fine
            return i["rest"]

        a.add_prefix_listener(reenter)
        a.start_turn("hi")
        a.next_request()
        assert len(errors) == 1


def test_a_token_counter_is_used_by_measure() -> None:
    items: List[str] = []
    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.set_token_counter(lambda it: (items.append(it["kind"]), {"tokens": 7})[1])
        a.start_turn("hi")
        m = a.measure()
        assert m["counter"] == "host" and "message" in items
        a.clear_token_counter()
        assert a.measure()["counter"] != "host"


def test_invoke_callback_runs_the_trampoline_through_the_library() -> None:
    assert lls.invoke_callback(lambda v: {"got": v}, [1, 2]) == {"got": [1, 2]}
    p = lls.PendingReply()
    threading.Timer(0.02, lambda: p.resolve("later")).start()
    assert lls.invoke_callback(lambda v: p, {}) == "later"
    with pytest.raises(lls.ListenerError, match="nope") as e:
        lls.invoke_callback(lambda v: (_ for _ in ()).throw(lls.CallbackError("nope")), {})
    assert e.value.detail["callback"] == "failed"
    with pytest.raises(ZeroDivisionError):
        lls.invoke_callback(lambda v: 1 / 0, {})
    with lls.Cancel() as c:
        held = lls.PendingReply()
        c.trip()
        with pytest.raises(lls.CancelledError):
            lls.invoke_callback(lambda v: held, {}, c)
        held.resolve(None)


def test_callbacks_from_many_threads_at_once() -> None:
    def worker(n: int, out: List[int]) -> None:
        with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
            a.add_prefix_listener(lambda i: [NOTE] + i["rest"])
            for k in range(5):
                a.start_turn(f"t{n}.{k}")
                a.next_request()
                a.record_response(assistant("ok"))
                a.end_turn()
            out.append(s.verify()["requests"])

    out: List[int] = []
    ts = [threading.Thread(target=worker, args=(n, out)) for n in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out == [5, 5, 5, 5]
    time.sleep(0)


def test_a_summariser_exception_during_automatic_compaction_is_not_a_silent_success() -> None:
    def broken(_i: Any) -> Any:
        raise KeyError("summariser bug")

    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.set_summariser(broken)
        a.set_policy(POLICY)
        with pytest.raises(KeyError, match="summariser bug"):
            long_turns(a, 4)
        a.set_policy(None)


def test_closing_an_agent_with_an_open_turn_disposes_it_and_releases_its_callbacks() -> None:
    with lls.Session.memory() as s:
        with lls.Agent(s, CONFIG) as a:
            a.add_prefix_listener(lambda i: i["rest"])
            a.start_turn("hi")
            assert lls.registered_callback_count() == 1
        assert lls.registered_callback_count() == 0
        assert s.events()[-1]["data"]["reason"] == "disposed"
        with lls.Agent(s, CONFIG):  # the session is free for a new instance
            pass
