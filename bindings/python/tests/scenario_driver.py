"""The Python scenario driver: plays the files of docs/scenarios.md through the binding (the ops
and the declarative fakes), records the golden transcript the Rust runner records, and compares
it with tests/scenarios/golden/<stem>.json (golden.py). What a scenario asserts is checked once,
by the Rust runner; this driver only dispatches and records. In ``pending`` mode every fake
answers through a pending reply that a worker thread completes (the ``LLS_CB_PENDING`` path)."""

from __future__ import annotations

import concurrent.futures
import copy
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import golden
import llmsession as lls

REPO = Path(__file__).resolve().parents[3]
POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2)
Json = Dict[str, Any]


def user_message(v: Any) -> Any:
    return {"role": "user", "content": [{"type": "text", "text": v}]} if isinstance(v, str) else v


def compact_json(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def count_of(v: Any) -> Optional[int]:
    """``v`` when it is a count (a JSON integer, 0 or more; not a bool), else None: what the Rust
    runner's ``as_u64`` reads."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def kind_of(spec: Json, n: int, default: str) -> str:
    """The kind of call ``n`` (from 0) of a fake: its own while ``times`` allows, else ``default``."""
    times = count_of(spec.get("times"))
    return spec.get("kind", default) if times is None or n < times else default


def chars(v: Any) -> int:
    """The characters of every string in ``v`` (object keys left out)."""
    if isinstance(v, str):
        return len(v)
    items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
    return sum(chars(x) for x in items)


class World:
    def __init__(self, sc: Json, mode: str) -> None:
        self.mode, self.agent, self.loads, self.disposed = mode, None, 0, False
        self.listeners: List[Json] = []
        self.pre_steps: List[Json] = []
        self.policy, self.counter = sc.get("policy", "absent"), sc.get("counter")
        self.summariser = sc.get("summariser") or {"kind": "fixed"}
        self.options = {**sc["agent"], "checkRequests": True}
        self.tmp = tempfile.mkdtemp(prefix="lls-scenario-")
        self.session = lls.Session.memory({"id": "scenario-session"})
        self.sessions = [self.session]
        self.cancel: Optional[lls.Cancel] = None  # the running op's token (fakes may trip it)
        self.calls: List[Json] = []  # what the fakes received since the previous op
        self.counter_calls = 0
        self.out: Json = {}  # what the running op produced, for its transcript entry
        self.pending: List[Any] = []  # every pending reply, waited for at the end
        self.summaries: List[str] = []  # every summarisation request's envelope, in order (for replay)
        self.sent: List[Any] = []  # (summaries before it, envelope) of every request and nativeBegin
        self.set_listeners(sc.get("listeners"), sc.get("preStep"))
        self.new_agent()

    def set_listeners(self, listeners: Any, pre: Any) -> None:
        mk = lambda i, s: {"spec": s, "index": i, "calls": 0, "held": copy.deepcopy(s.get("messages") or [])}  # noqa: E731
        if isinstance(listeners, list):
            self.listeners = [mk(i, s) for i, s in enumerate(listeners)]
        if isinstance(pre, list):
            self.pre_steps = [mk(i, s) for i, s in enumerate(pre)]

    def fake(self, note: Callable[[Any], None], body: Callable[[Any, int], Any], st: Optional[Json] = None) -> Callable[[Any], Any]:
        """``note`` records the call; ``body(input, n)`` answers call ``n``: at once, or in
        pending mode through a reply that a worker thread completes a moment later."""
        st = st if st is not None else {"calls": 0}
        def fn(value: Any) -> Any:
            note(value)
            n, st["calls"] = st["calls"], st["calls"] + 1
            if self.mode != "pending":
                return body(value, n)
            try:
                answer, error = body(value, n), None
            except lls.CallbackError as e:
                answer, error = None, e
            def later() -> Any:
                time.sleep(0.001)
                if error is not None:
                    raise error
                return answer
            self.pending.append(POOL.submit(later))
            return self.pending[-1]
        return fn

    def append(self, messages: Any, source: str) -> None:
        for m in messages or []:
            self.session.append({"type": "user/message", "data": {"message": m, "source": source}, "surfaceOp": "append"})

    def dispose_from_callback(self) -> None:
        self.disposed = True  # the instance is dropped after the op
        self.agent.dispose()

    def trip(self) -> None:
        if self.cancel is not None:
            self.cancel.trip()

    def effects(self, kind: str, spec: Json, failure: str) -> None:
        """What a fake of ``kind`` does besides answering (docs/scenarios.md, the fakes)."""
        if kind == "fail":
            raise lls.CallbackError(failure)
        if kind == "cancel":
            self.trip()
        if kind in ("inject", "append-event", "append-during"):
            self.append(spec.get("events" if kind == "append-event" else "messages"), "host" if kind == "append-during" else "plugin")
        if kind == "dispose":
            self.dispose_from_callback()

    def prefix_listener(self, st: Json) -> Callable[[Any], Any]:
        def body(value: Any, n: int) -> Any:
            rest, spec, kind = value["rest"], st["spec"], st["spec"].get("kind", "delegate")
            if kind in ("append", "delegate"):
                return rest + st["held"] if kind == "append" else rest
            kind = kind_of(spec, n, "prepend")
            if kind == "invalid":
                return spec.get("output")
            self.effects(kind, spec, spec["message"] if isinstance(spec.get("message"), str) else "listener failed")
            return rest if kind == "dispose" else st["held"] + rest
        return self.fake(lambda v: self.calls.append({"callback": "prefix", "listener": st["index"], "input": v}), body, st)

    def pre_step(self, st: Json) -> Callable[[Any], Any]:
        body = lambda _v, n: self.effects(kind_of(st["spec"], n, "record"), st["spec"], "pre-step failed")  # noqa: E731
        return self.fake(lambda v: self.calls.append({"callback": "preStep", "listener": st["index"], "input": v}), body, st)

    def make_counter(self, spec: Json) -> Callable[[Any], Any]:
        per = count_of(spec.get("perToken"))
        per = 4 if per is None else max(per, 1)
        def body(item: Any, n: int) -> int:
            self.effects(kind_of(spec, n, "chars"), spec, "token counter failed")
            return math.ceil(chars(item) / per)
        return self.fake(lambda _v: setattr(self, "counter_calls", self.counter_calls + 1), body)

    def make_summariser(self, spec: Json) -> Callable[[Any], Any]:
        def note(v: Json) -> None:  # the envelope is recorded as its size and message count
            req = v.get("request")
            self.summaries.append(compact_json(req))
            msgs = req.get("messages") if isinstance(req, dict) else None
            keys = ("digest", "provider", "model", "maxTokens", "sharedMessages", "prefixLen")
            size = {"bytes": len(compact_json(req).encode()), "messageCount": len(msgs) if isinstance(msgs, list) else None}
            self.calls.append({"callback": "summariser", "input": {**{k: v.get(k) for k in keys}, **size}})
        def body(_v: Any, n: int) -> Json:
            ok: Json = {"text": spec["text"] if isinstance(spec.get("text"), str) else "Summary of the work so far."}
            ok.update({"usage": spec["usage"]} if "usage" in spec else {})
            kind = kind_of(spec, n, "fixed")
            self.effects(kind, spec, "summariser unavailable")
            if kind == "cancel":
                raise lls.CallbackError("cancelled")
            extra = {"empty": {"text": "   "}, "long": {"text": "very long summary " * 20000}, "truncated": {"truncated": True}}
            return {**ok, **extra.get(kind, {})}
        return self.fake(note, body)

    def new_agent(self) -> None:
        agent = lls.Agent(self.session, self.options)
        try:
            for st in self.listeners:
                agent.add_prefix_listener(self.prefix_listener(st))
            for st in self.pre_steps:
                agent.add_pre_step_listener(self.pre_step(st))
            if self.policy != "absent":
                agent.set_policy(self.policy)
            agent.set_summariser(self.make_summariser(self.summariser))
            if self.counter is not None:
                agent.set_token_counter(self.make_counter(self.counter))
        except BaseException:
            agent.close()
            raise
        self.agent = agent

    def need_agent(self) -> lls.Agent:
        if self.agent is None:
            raise RuntimeError("no live agent (disposed?)")
        return self.agent

    def drop_agent(self) -> None:
        a, self.agent = self.agent, None
        if a is not None:
            a.dispose()
            a.close()

    def set_out(self, key: str, f: Callable[[], Any]) -> Callable[[], None]:
        return lambda: self.out.__setitem__(key, f())

    def close(self) -> None:
        concurrent.futures.wait(self.pending)
        if self.agent is not None:
            self.agent.close()
        for s in self.sessions:
            s.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def attempt(w: World, f: Callable[[], Any]) -> None:
    """Runs ``f``; a library error is the op's outcome ("error" with its kind, field, message)."""
    try:
        f()
    except lls.LlmSessionError as e:  # anything else is a bug of the driver or the binding
        w.out["outcome"] = "error"
        w.out["error"] = {"kind": e.kind, "message": e.message, **({"field": e.field} if e.field is not None else {})}


def load(w: World, op: Json) -> None:
    """``load``: reopens the session from a log file written from the op's records (or the log's)."""
    recs = op["records"] if "records" in op else [w.session.info()] + w.session.events()
    records = [r if isinstance(r, str) else compact_json(r) for r in recs]
    if count_of(op.get("dropLast")) is not None:
        records = records[: max(0, len(records) - op["dropLast"])]
    for e in op.get("edit") or []:
        hits = [i for i, r in enumerate(records) if e["replace"] in r]
        i = hits[-1] if hits else len(records)
        if isinstance(e.get("record"), int):
            i = len(records) + e["record"] if e["record"] < 0 else e["record"]
        if not 0 <= i < len(records) or e["replace"] not in records[i]:
            raise RuntimeError(f"load: record {i} does not contain {e['replace']!r}")
        records[i] = records[i].replace(e["replace"], e["with"], 1)
    w.drop_agent()
    w.loads += 1
    path = Path(w.tmp) / f"load-{w.loads}.jsonl"
    path.write_text("".join(r + "\n" for r in records) + (op["tail"] if isinstance(op.get("tail"), str) else ""), encoding="utf-8")

    def open_it() -> None:
        w.sessions.append(lls.Session.open_file(path))
        w.out["loadReport"] = w.sessions[-1].load_report()
        w.session = w.sessions[-1]

    attempt(w, open_it)
    w.new_agent()  # on a failed open the session stays the one before


def run_op(w: World, op: Json) -> None:
    name = op["op"]
    if name in ("turn", "inject"):
        f = w.need_agent().start_turn if name == "turn" else w.need_agent().inject
        attempt(w, lambda: f(user_message(op["user"])))
    elif name == "endTurn":
        attempt(w, lambda: w.need_agent().end_turn(op["reason"] if isinstance(op.get("reason"), str) else "completed"))
    elif name == "request":
        if op.get("cancelled") is True:
            w.trip()
        agent = w.need_agent()

        def request() -> None:
            r = agent.next_request(w.cancel)
            w.out["request"] = r.info
            w.sent.append((len(w.summaries), r.json))

        attempt(w, request)
        w.disposed = w.disposed or w.out.get("error", {}).get("kind") == "disposed"
    elif name == "respond":
        content: List[Any] = [{"type": "text", "text": op["text"]}] if isinstance(op.get("text"), str) else []
        for c in op.get("toolCalls") or []:
            args = c["arguments"] if isinstance(c.get("arguments"), str) else "{}"
            content.append({"type": "tool-call", "id": c["id"], "name": c["name"], "arguments": args})
        response: Json = {"message": op["message"] if "message" in op else {"role": "assistant", "content": content}}
        if "usage" in op:
            response["usage"] = op["usage"]
        attempt(w, lambda: w.need_agent().record_response(response))
    elif name == "toolResult":
        r: Json = {"callId": op["callId"] if "callId" in op else ""}
        r.update({"content": op["content"]} if "content" in op else {"text": op["text"] if isinstance(op.get("text"), str) else "ok"})
        if "isError" in op:
            r["isError"] = op["isError"]
        attempt(w, lambda: w.need_agent().record_tool_result(r))
    elif name == "providerError":
        err = {"message": op["message"] if isinstance(op.get("message"), str) else "provider error", "overflow": op.get("overflow") is True}
        agent = w.need_agent()
        attempt(w, w.set_out("providerError", lambda: "retry" if agent.provider_error(err, w.cancel) else "recorded"))
    elif name == "setOptions":
        o = {**w.options, **{k: op[k] for k in ("tools", "config") if k in op}}  # as written: [] and {} too
        if isinstance(op.get("system"), str):
            o["system"] = op["system"]
        elif "system" in op:
            o.pop("system", None)
        attempt(w, lambda: (w.need_agent().set_options(o), setattr(w, "options", o)))  # invalid: nothing changes
    elif name == "mutateListener":
        for m in w.listeners[count_of(op.get("index")) or 0]["held"]:
            m["content"] = [{"type": "text", "text": op["text"] if isinstance(op.get("text"), str) else "mutated"}]
    elif name == "resume":
        w.drop_agent()
        if op.get("reload") is not False:
            path = Path(w.tmp) / f"reload-{len(w.sessions)}.jsonl"
            path.write_text(w.session.export_jsonl(), encoding="utf-8")
            w.session = lls.Session.open_file(path)
            w.sessions.append(w.session)
        w.set_listeners(op.get("listeners"), op.get("preStep"))
        if "system" in op:
            w.options = {**w.options, "system": op["system"]}
            if not isinstance(op["system"], str):
                del w.options["system"]
        attempt(w, w.new_agent)
    elif name == "secondAgent":
        attempt(w, lambda: lls.Agent(w.session, w.options).close())
    elif name == "fork":
        w.drop_agent()
        o: Json = {"id": "forked-session", **({"seedLength": op["seedLength"]} if count_of(op.get("seedLength")) is not None else {})}
        attempt(w, lambda: (setattr(w, "session", w.session.fork(o)), w.sessions.append(w.session)))
        w.new_agent()  # on error the old session gets a new instance
    elif name == "compact":
        agent = w.need_agent()
        def compact() -> None:
            try:
                w.out["compaction"] = agent.compact(op.get("span"), w.cancel)
            except lls.LlmSessionError as e:  # the C ABI reports a failed compaction as an error
                if not isinstance(e.detail.get("outcome"), dict):
                    raise
                w.out["compaction"] = e.detail["outcome"]
        attempt(w, compact)
    elif name == "setPolicy":
        attempt(w, lambda: (w.need_agent().set_policy(op["policy"]), setattr(w, "policy", op["policy"])))
    elif name == "setSummariser":
        w.summariser = op["summariser"]
        w.need_agent().set_summariser(w.make_summariser(op["summariser"]))
    elif name == "setCounter":
        w.counter = op.get("counter")  # null (or absent): the built-in estimate; {} is a counter
        if w.counter is not None:
            w.need_agent().set_token_counter(w.make_counter(w.counter))
        else:
            w.need_agent().clear_token_counter()
    elif name == "dispose":
        w.drop_agent()
    elif name == "load":
        load(w, op)
    elif name == "nativeBegin":

        def begin() -> None:
            r = dict(w.need_agent().begin_native_compaction())
            w.sent.append((len(w.summaries), r["envelope"]))
            w.out["native"] = {**r, "envelope": len(r["envelope"].encode()), "body": len(r["body"].encode())}

        attempt(w, begin)
    elif name == "nativeRecord":
        attempt(w, w.set_out("native", lambda: w.need_agent().record_native_compaction(compact_json(op["body"]))))
    elif name == "nativeFail":
        why = op["error"] if isinstance(op.get("error"), str) else ""
        attempt(w, w.set_out("native", lambda: w.need_agent().fail_native_compaction(why)))
    elif name == "replay":

        def replay() -> None:
            r = lls.Replay.from_session(w.session)
            try:
                order: List[str] = []
                done = 0
                for mark, env in w.sent:
                    order += w.summaries[done:mark] + [env]
                    done = mark
                order += w.summaries[done:]
                answers = []
                for env in order:
                    a = r.answer(env.encode())
                    answers.append({"purpose": a["purpose"], "id": a["id"], "outcome": a["outcome"]})
                w.out["replay"] = {"requests": r.info()["requests"], "answers": answers}
            finally:
                r.close()

        attempt(w, replay)
    elif name == "explain":

        def explain() -> None:
            x = w.session.explain()
            t = x["totals"]
            w.out["explain"] = {
                "compactions": x["compactions"],
                "compactionTotals": x["compactionTotals"],
                "requests": {"conversation": t["conversationRequests"], "compaction": t["compactionRequests"], "notRebuilt": t["notRebuilt"]},
            }

        attempt(w, explain)
    elif name not in ("expectLog", "expectSummaryRequest", "expectPreStep"):  # those: the Rust runner's
        raise RuntimeError(f"unknown op {name!r}")


def run_file(file: Path, mode: str = "sync") -> None:
    """Runs one scenario file and compares its transcript with the golden file."""
    sc = golden.expand(json.loads(file.read_text(encoding="utf-8")))
    w = World(sc, mode)
    try:
        ops = []
        for i, op in enumerate(sc["ops"]):
            w.out, w.cancel = {}, lls.Cancel()  # the op's cancel token, which fakes may trip
            try:
                run_op(w, op)
            except Exception as e:
                raise AssertionError(f"op {i} ({op['op']!r}): {e!r}") from e
            finally:
                if w.disposed and w.agent is not None:
                    w.agent.close()  # an instance a callback disposed is dropped
                    w.agent = None
                w.disposed = False
                w.cancel.close()
            entry = {"i": i, "op": op["op"], "outcome": "ok", **w.out, "events": len(w.session.events())}
            entry.update({"calls": w.calls} if w.calls else {})
            entry.update({"counterCalls": w.counter_calls} if w.counter_calls else {})
            w.calls, w.counter_calls = [], 0
            ops.append(entry)
        final = {
            "session": golden.masked_record(w.session.info()),
            "events": [golden.masked_record(e) for e in w.session.events()],
            "history": w.session.history(),
        }
        doc = {"transcript": 1, "scenario": file.name, "name": sc["name"] if isinstance(sc.get("name"), str) else "(unnamed)", "ops": ops, "final": final}
        out = REPO / "target" / "tmp" / f"scenario-transcripts-python-{mode}"
        golden.settle(file, golden.mask_strings(doc, w.tmp), out, mode)
        log = Path(w.tmp) / "verify.jsonl"  # the final log verifies through the binding
        log.write_text(w.session.export_jsonl(), encoding="utf-8")
        lls.verify_file(log)
    finally:
        w.close()
