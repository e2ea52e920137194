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
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2)


def user_message(v: Any) -> Any:
    return {"role": "user", "content": [{"type": "text", "text": v}]} if isinstance(v, str) else v


def context_event(message: Any, source: str) -> Dict[str, Any]:
    return {"type": "user/message", "data": {"message": message, "source": source}, "surfaceOp": "append"}


def active(spec: Dict[str, Any], n: int) -> bool:
    """Whether call ``n`` (from 0) of a fake still behaves as its kind says (``times``)."""
    return not isinstance(spec.get("times"), int) or n < spec["times"]


def chars(v: Any) -> int:
    """The characters of every string in ``v`` (object keys left out)."""
    if isinstance(v, str):
        return len(v)
    if isinstance(v, dict):
        return sum(chars(x) for x in v.values())
    if isinstance(v, list):
        return sum(chars(x) for x in v)
    return 0


def _later(body: Callable[[], Any]) -> "concurrent.futures.Future[Any]":
    def work() -> Any:
        time.sleep(0.001)
        return body()

    return _POOL.submit(work)


class World:
    def __init__(self, sc: Dict[str, Any], mode: str) -> None:
        self.mode, self.agent, self.loads = mode, None, 0
        self.listeners: List[Dict[str, Any]] = []
        self.pre_steps: List[Dict[str, Any]] = []
        self.policy, self.counter = sc.get("policy", "absent"), sc.get("counter")
        self.tmp = tempfile.mkdtemp(prefix="lls-scenario-")
        self.session = lls.Session.memory({"id": "scenario-session"})
        self.sessions = [self.session]
        self.options = {**sc["agent"], "checkRequests": True}
        self.summariser = sc.get("summariser") or {"kind": "fixed"}
        self.disposed = False  # a callback disposed the instance during the running op
        self.cancel: Optional[lls.Cancel] = None  # the running op's cancel token (fakes may trip it)
        self.calls: List[Dict[str, Any]] = []  # what the fakes received since the previous op
        self.counter_calls = 0
        self.out: Dict[str, Any] = {}
        self.set_listeners(sc.get("listeners"), sc.get("preStep"))
        self.new_agent()

    def set_listeners(self, listeners: Any, pre: Any) -> None:
        def mk(spec: Dict[str, Any], index: int) -> Dict[str, Any]:
            return {"spec": spec, "index": index, "calls": 0, "held": copy.deepcopy(spec.get("messages") or [])}

        if isinstance(listeners, list):
            self.listeners = [mk(s, i) for i, s in enumerate(listeners)]
        if isinstance(pre, list):
            self.pre_steps = [mk(s, i) for i, s in enumerate(pre)]

    def fake(self, note: Callable[[Any], None], body: Callable[[Any, int], Any], st: Optional[Dict[str, Any]] = None) -> Callable[[Any], Any]:
        """``note`` records the call; ``body(input, n)`` answers call ``n``: at once, or in
        pending mode through a reply a worker thread completes."""
        st = st if st is not None else {"calls": 0}

        def fn(value: Any) -> Any:
            note(value)
            n = st["calls"]
            st["calls"] += 1
            if self.mode != "pending":
                return body(value, n)
            try:
                answer = body(value, n)
            except lls.CallbackError as e:
                err = e
                return _later(lambda: (_ for _ in ()).throw(err))
            return _later(lambda: answer)

        return fn

    def append(self, messages: Any, source: str) -> None:
        for m in messages or []:
            self.session.append(context_event(m, source))

    def dispose_from_callback(self) -> None:
        self.disposed = True
        try:
            self.agent.dispose()
        except lls.LlmSessionError:
            pass

    def trip(self) -> None:
        if self.cancel is not None:
            self.cancel.trip()

    def prefix_listener(self, st: Dict[str, Any]) -> Callable[[Any], Any]:
        def body(value: Any, n: int) -> Any:
            rest, spec = value["rest"], st["spec"]
            kind = spec.get("kind", "delegate")
            if kind == "append":
                return rest + st["held"]
            if kind == "delegate":
                return rest
            if active(spec, n):
                if kind == "fail":
                    raise lls.CallbackError(spec.get("message") or "listener failed")
                if kind == "invalid":
                    return spec.get("output")
                if kind == "cancel":
                    self.trip()
                if kind == "append-event":
                    self.append(spec.get("events"), "plugin")
                if kind == "dispose":
                    self.dispose_from_callback()
                    return rest
            return st["held"] + rest

        return self.fake(lambda v: self.calls.append({"callback": "prefix", "listener": st["index"], "input": v}), body, st)

    def pre_step(self, st: Dict[str, Any]) -> Callable[[Any], Any]:
        def body(_v: Any, n: int) -> Any:
            kind = st["spec"].get("kind", "record") if active(st["spec"], n) else "record"
            if kind == "inject":
                self.append(st["spec"].get("messages"), "plugin")
            if kind == "fail":
                raise lls.CallbackError("pre-step failed")
            if kind == "cancel":
                self.trip()
            if kind == "dispose":
                self.dispose_from_callback()
            return None

        return self.fake(lambda v: self.calls.append({"callback": "preStep", "listener": st["index"], "input": v}), body, st)

    def make_counter(self, spec: Dict[str, Any]) -> Callable[[Any], Any]:
        per = spec["perToken"] if isinstance(spec.get("perToken"), (int, float)) and spec["perToken"] >= 1 else 4

        def note(_v: Any) -> None:
            self.counter_calls += 1

        def body(item: Any, n: int) -> Any:
            kind = spec.get("kind", "chars") if active(spec, n) else "chars"
            if kind == "fail":
                raise lls.CallbackError("token counter failed")
            if kind == "append-during":
                self.append(spec.get("messages"), "host")
            if kind == "dispose":
                self.dispose_from_callback()
            return math.ceil(chars(item) / per)

        return self.fake(note, body)

    def make_summariser(self, spec: Dict[str, Any]) -> Callable[[Any], Any]:
        def note(v: Dict[str, Any]) -> None:  # the envelope is kept as its size
            req = v.get("request")
            size = len(json.dumps(req, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
            count = len(req["messages"]) if isinstance(req, dict) and isinstance(req.get("messages"), list) else None
            keys = ("digest", "provider", "model", "maxTokens", "sharedMessages", "prefixLen")
            self.calls.append({"callback": "summariser", "input": {**{k: v.get(k) for k in keys}, "bytes": size, "messageCount": count}})

        def body(_v: Any, n: int) -> Any:
            ok: Dict[str, Any] = {"text": spec["text"] if isinstance(spec.get("text"), str) else "Summary of the work so far."}
            if spec.get("usage"):
                ok["usage"] = spec["usage"]
            kind = spec.get("kind", "fixed") if active(spec, n) else "fixed"
            if kind == "fail":
                raise lls.CallbackError("summariser unavailable")
            if kind == "cancel":
                self.trip()
                raise lls.CallbackError("cancelled")
            if kind == "append-during":
                self.append(spec.get("messages"), "host")
            if kind == "dispose":
                self.dispose_from_callback()
            if kind == "empty":
                return {**ok, "text": "   "}
            if kind == "long":
                return {**ok, "text": "very long summary " * 20000}
            return {**ok, "truncated": True} if kind == "truncated" else ok

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
            if self.counter:
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

    def close(self) -> None:
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
        w.out["error"] = {"kind": e.kind, "message": e.message}
        if e.detail.get("field") is not None:
            w.out["error"]["field"] = e.detail["field"]


def load(w: World, op: Dict[str, Any]) -> None:
    """``load``: reopens the session from a log file written from the op's records (or the log's)."""
    if "records" in op:
        records = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in op["records"]]
    else:
        recs = [w.session.info()] + list(w.session.events())
        records = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in recs]
    if isinstance(op.get("dropLast"), int):
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
        s = lls.Session.open_file(path)
        w.sessions.append(s)
        w.out["loadReport"] = s.load_report()
        w.session = s

    attempt(w, open_it)
    w.new_agent()  # on a failed open the session stays the one before


def run_op(w: World, op: Dict[str, Any]) -> None:
    name = op["op"]
    if name in ("turn", "inject"):
        f = w.need_agent().start_turn if name == "turn" else w.need_agent().inject
        return attempt(w, lambda: f(user_message(op["user"])))
    if name == "endTurn":
        return attempt(w, lambda: w.need_agent().end_turn(op.get("reason") or "completed"))
    if name == "request":
        if op.get("cancelled") is True:
            w.trip()
        agent = w.need_agent()
        attempt(w, lambda: w.out.__setitem__("request", agent.next_request(w.cancel).info))
        if w.out.get("error", {}).get("kind") == "disposed":
            w.disposed = True  # dropped after the op
        return None
    if name == "respond":
        content: List[Any] = [{"type": "text", "text": op["text"]}] if isinstance(op.get("text"), str) else []
        for c in op.get("toolCalls") or []:
            args = c["arguments"] if isinstance(c.get("arguments"), str) else "{}"
            content.append({"type": "tool-call", "id": c["id"], "name": c["name"], "arguments": args})
        response: Dict[str, Any] = {"message": op.get("message") or {"role": "assistant", "content": content}}
        if op.get("usage"):
            response["usage"] = op["usage"]
        return attempt(w, lambda: w.need_agent().record_response(response))
    if name == "toolResult":
        r: Dict[str, Any] = {"callId": op.get("callId") or ""}
        if op.get("content"):
            r["content"] = op["content"]
        else:
            r["text"] = op["text"] if isinstance(op.get("text"), str) else "ok"
        if "isError" in op:
            r["isError"] = op["isError"]
        return attempt(w, lambda: w.need_agent().record_tool_result(r))
    if name == "providerError":
        err = {"message": op["message"] if isinstance(op.get("message"), str) else "provider error", "overflow": op.get("overflow") is True}
        agent = w.need_agent()
        return attempt(w, lambda: w.out.__setitem__("providerError", "retry" if agent.provider_error(err, w.cancel) else "recorded"))
    if name == "setOptions":
        o = dict(w.options)
        if isinstance(op.get("system"), str):
            o["system"] = op["system"]
        elif "system" in op:
            o.pop("system", None)
        for k in ("tools", "config"):
            if op.get(k):
                o[k] = op[k]

        def set_options() -> None:
            w.need_agent().set_options(o)
            w.options = o  # invalid options change nothing

        return attempt(w, set_options)
    if name == "mutateListener":
        for m in w.listeners[op.get("index") or 0]["held"]:
            m["content"] = [{"type": "text", "text": op.get("text") or "mutated"}]
        return None
    if name == "resume":
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
        return attempt(w, w.new_agent)
    if name == "secondAgent":
        return attempt(w, lambda: lls.Agent(w.session, w.options).close())
    if name == "fork":
        w.drop_agent()
        o: Dict[str, Any] = {"id": "forked-session"}
        if isinstance(op.get("seedLength"), int):
            o["seedLength"] = op["seedLength"]

        def fork() -> None:
            w.session = w.session.fork(o)
            w.sessions.append(w.session)

        attempt(w, fork)
        return w.new_agent()  # on error the old session gets a new instance
    if name == "compact":
        agent = w.need_agent()

        def compact() -> None:
            try:
                w.out["compaction"] = agent.compact(op.get("span"), w.cancel)
            except lls.LlmSessionError as e:  # the C ABI reports a failed compaction as an error
                if not isinstance(e.detail.get("outcome"), dict):
                    raise
                w.out["compaction"] = e.detail["outcome"]

        return attempt(w, compact)
    if name == "setPolicy":

        def set_policy() -> None:
            w.need_agent().set_policy(op["policy"])
            w.policy = op["policy"]

        return attempt(w, set_policy)
    if name == "setSummariser":
        w.summariser = op["summariser"]
        return w.need_agent().set_summariser(w.make_summariser(op["summariser"]))
    if name == "setCounter":
        w.counter = op.get("counter") or None
        if w.counter:
            return w.need_agent().set_token_counter(w.make_counter(w.counter))
        return w.need_agent().clear_token_counter()
    if name == "dispose":
        return w.drop_agent()
    if name == "load":
        return load(w, op)
    if name in ("expectLog", "expectSummaryRequest", "expectPreStep"):
        return None  # checked by the Rust runner
    raise RuntimeError(f"unknown op {name!r}")


def run_file(file: Path, mode: str = "sync") -> None:
    """Runs one scenario file and compares its transcript with the golden file."""
    sc = golden.expand(json.loads(file.read_text(encoding="utf-8")))
    w = World(sc, mode)
    try:
        ops = []
        for i, op in enumerate(sc["ops"]):
            w.out = {}
            w.cancel = lls.Cancel()  # the op's cancel token, which fakes may trip
            try:
                run_op(w, op)
            except Exception as e:
                raise AssertionError(f"op {i} ({op['op']!r}): {e!r}") from e
            finally:
                if w.disposed and w.agent is not None:
                    w.agent.close()  # an instance a callback disposed is dropped
                if w.disposed:
                    w.agent = None
                w.disposed = False
                w.cancel.close()
            entry = {"i": i, "op": op["op"], "outcome": "ok", **w.out, "events": len(w.session.events())}
            if w.calls:
                entry["calls"] = w.calls
            if w.counter_calls:
                entry["counterCalls"] = w.counter_calls
            w.calls, w.counter_calls = [], 0
            ops.append(entry)
        final = {
            "session": golden.masked_record(w.session.info()),
            "events": [golden.masked_record(e) for e in w.session.events()],
            "history": w.session.history(),
        }
        doc = {"transcript": 1, "scenario": file.name, "name": sc.get("name") or "(unnamed)", "ops": ops, "final": final}
        transcript = golden.mask_strings(doc, w.tmp)
        golden.settle(file, transcript, REPO / "target" / "tmp" / f"scenario-transcripts-python-{mode}", mode)
        log = Path(w.tmp) / "verify.jsonl"  # the final log verifies through the binding
        log.write_text(w.session.export_jsonl(), encoding="utf-8")
        lls.verify_file(log)
    finally:
        w.close()
