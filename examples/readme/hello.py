# The README's Python example: one turn through llmsession, with a canned provider reply.
import json

import llmsession  # pip install bindings/python

opts = {"config": {"provider": "llama.cpp", "model": "smollm2"}, "system": "Be brief."}
with llmsession.Session.open_file("hello.jsonl") as session, llmsession.Agent(session, opts) as agent:
    agent.set_renderer("openai")  # bodies for /chat/completions
    agent.start_turn("Hi!")
    body = agent.next_body().body  # bytes to POST; logged, verify() rebuilds it byte for byte
    reply = {
        "choices": [{"message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 14, "completion_tokens": 3},
    }
    agent.record_body(json.dumps(reply))  # the provider's raw answer
    agent.end_turn("completed")
    print(f"sent {len(body)} bytes; verify: {json.dumps(session.verify(), separators=(',', ':'))}")
