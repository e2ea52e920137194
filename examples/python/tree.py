"""An agent tree with asyncio: a lead hands two tasks to two child agents that run as tasks of
their own (``asyncio.gather``), each child's first request extending the lead's last one; they
finish in any order and their answers become the lead's tool results, in call order. A
scripted "model" stands in for the provider. docs/caching.md ("Agent trees").

    python examples/python/tree.py [DIR]

The logs go to DIR (a temporary directory by default): lead.jsonl and the children beside it,
lead.task_1.jsonl and lead.task_2.jsonl (``llmsession tree DIR/lead.jsonl``). Run by the
Python tests (bindings/python/tests/test_tree.py).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import llmsession as lls


def reply(text: str, calls: List[Dict[str, str]] = []) -> Dict[str, Any]:
    content: List[Dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "tool-call", **c} for c in calls]
    return {"message": {"role": "assistant", "content": content}}


async def main(directory: str) -> List[Dict[str, Any]]:
    with lls.Session.open_file(Path(directory) / "lead.jsonl", {"id": "lead"}) as session:
        async with lls.AsyncAgent.create(
            session,
            {
                "config": {"provider": "openai", "model": "gpt-4o-mini"},
                "system": "You lead a team of coding agents. Hand tasks to subagents with the task tool.",
                "tools": [{"name": "task", "description": "Hand a task to a subagent", "parameters": {"type": "object"}}],
            },
        ) as lead:
            lead.set_renderer("openai")
            lead.start_turn("Fix issues #12 and #15.")
            await lead.next_body()
            lead.record_response(
                reply(
                    "Two subagents, one per issue.",
                    [
                        {"id": "task_1", "name": "task", "arguments": '{"issue":12}'},
                        {"id": "task_2", "name": "task", "arguments": '{"issue":15}'},
                    ],
                )
            )
            tasks = [
                ("task_1", "Fix issue #12 (rounding).", "Rounded to one decimal.", 0.03),
                ("task_2", "Fix issue #15 (timeout).", "Added a 10 s timeout.", 0.0),
            ]
            children = [lead.spawn(directive, call_id) for call_id, directive, _, _ in tasks]

            async def run(i: int) -> Any:
                child_session, child = children[i]
                body = await child.next_body()
                print(f"{child_session.id}: first request, {body.info['messageCount']} messages")
                await asyncio.sleep(tasks[i][3])
                child.record_response(reply(tasks[i][2]))
                return await lead.finish_child(child)

            outcomes = await asyncio.gather(run(0), run(1))
            for o in outcomes:
                print(f"{o['child']} answered {o.get('callId')}: {o['answer']} ({o['recorded']} result(s) logged then)")
            await lead.next_body()
            lead.record_response(reply("Both fixed."))
            lead.end_turn()
            tree = session.explain({"tree": True})
            print(f"tree: {tree['totals']['nodes']} sessions, {tree['totals']['all']['requests']} requests")
            for child_session, child in children:
                child_session.verify()
                child.close()
                child_session.close()
    return [dict(o) for o in outcomes]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="lls-py-tree-")))
