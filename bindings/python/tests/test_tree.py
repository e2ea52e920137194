"""Agent trees: children spawned from the parent's open tool calls run as asyncio tasks and
finish in any order; their answers become the parent's tool results in call order; a child
keeps its parent's model; a woken child sends what it sent before."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import llmsession as lls
from conftest import CONFIG, assistant

CALLS = {
    "message": {
        "role": "assistant",
        "content": [
            {"type": "tool-call", "id": "c1", "name": "task", "arguments": '{"n":1}'},
            {"type": "tool-call", "id": "c2", "name": "task", "arguments": '{"n":2}'},
        ],
    }
}


def test_two_children_as_tasks_answer_in_call_order() -> None:
    async def main() -> None:
        with lls.Session.memory() as s:
            async with lls.AsyncAgent.create(s, dict(CONFIG, system="You lead.")) as a:
                a.set_renderer("anthropic")
                a.start_turn("Fix both.")
                parent = await a.next_body()
                a.record_response(CALLS)
                kids = [a.spawn(f"Fix {c}.", c) for c in ("c1", "c2")]

                async def run(i: int, delay: float) -> Any:
                    _, k = kids[i]
                    body = await k.next_body()
                    child = json.loads(body.body)
                    mine = json.loads(parent.body)
                    assert child["system"] == mine["system"] and child["model"] == mine["model"]
                    assert lls.DEFAULT_PLACEHOLDER in body.json
                    await asyncio.sleep(delay)
                    k.record_response(assistant(f"answer {i + 1}"))
                    return await a.finish_child(k)

                # The second child finishes first: its result waits for the first's.
                out = await asyncio.gather(run(0, 0.05), run(1, 0.0))
                assert [o["recorded"] for o in out] == [2, 0]
                assert out[1]["answer"] == "answer 2" and not out[1]["isError"]
                results = [e["data"] for e in s.events() if e["type"] == "tool/result"]
                assert [r["callId"] for r in results] == ["c1", "c2"]
                assert results[0]["child"] == kids[0][0].id
                await a.next_body()
                tree = s.explain({"tree": True})
                assert tree["totals"]["nodes"] == 3
                assert [n["kind"] for n in tree["nodes"]] == ["root", "spawn", "spawn"]
                for cs, k in kids:
                    cs.verify()
                    k.close()
                    cs.close()

    asyncio.run(main())


def test_a_child_keeps_the_parents_model_and_wakes_byte_for_byte(tmp_path: Any) -> None:
    path = tmp_path / "lead.jsonl"
    with lls.Session.open_file(path) as s, lls.Agent(s, CONFIG) as a:
        a.start_turn("hi")
        a.next_request()
        a.record_response(CALLS)
        cs, k = a.spawn("Do c1.", "c1")
        with pytest.raises(lls.InvalidInputError, match="is a child agent"):
            k.set_options({"config": {"provider": "test", "model": "m2"}})
        with pytest.raises(lls.OutOfOrderError):
            a.spawn("Do it again.", "c9")
        first = k.next_request()
        k.record_response(assistant("done"))
        k.end_turn()
        k.close()
        cs.close()
        # Reopened from its file (beside the parent, named after it), woken with the log's options.
        with lls.Session.open_file(tmp_path / "lead.c1.jsonl") as again, lls.wake(again) as w:
            w.start_turn("And more?")
            r = w.next_request()
            assert r.envelope["messages"][: len(first.envelope["messages"])] == first.envelope["messages"]
            assert r.envelope["sessionId"] == s.id
            again.verify()


def test_the_example_runs(tmp_path: Any) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "python" / "tree.py"
    spec = importlib.util.spec_from_file_location("tree_example", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    outcomes = asyncio.run(mod.main(str(tmp_path)))
    assert [o["callId"] for o in outcomes] == ["task_1", "task_2"]
    assert (tmp_path / "lead.task_2.jsonl").exists()
    lls.verify_file(tmp_path / "lead.task_1.jsonl")
