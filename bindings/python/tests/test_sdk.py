"""With the official SDKs (docs/python.md, "With the official SDKs"): tool calls as data, SDK
objects and Python values accepted where JSON is, a body handed to an SDK method, and the SDKs'
raw streams fed to the accumulator. The SDKs (pinned in tests/requirements-sdk.txt) talk HTTP
to a local server that answers with the recorded provider bytes of tests/data/stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterator

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as genai_types

import llmsession as lls
from http_fixture import Recorded as Server

DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "stream"
READ_FILE = {
    "name": "read_file",
    "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
# Per renderer: the agent's config, the recorded non-streamed body, its stream, and the calls.
PROVIDERS = {
    "openai": (
        {"provider": "llama.cpp", "model": "smollm2", "cache_prompt": True},
        "openai-chat-tools.json",
        "openai-chat-tools.sse",
        [("call_Qa1", "read_file", {"path": "café.txt", "lines": 20}), ("call_Rb2", "list_dir", {"dir": "ü/"})],
    ),
    "anthropic": (
        {"provider": "anthropic", "model": "claude-sonnet-4-5", "maxTokens": 256},
        "anthropic-tools.json",
        "anthropic-tools.sse",
        [("toolu_01AbC", "read_file", {"path": "café.txt", "lines": 20})],
    ),
    "gemini": ({"provider": "gemini", "model": "gemini-2.5-flash"}, "gemini-tools.json", "gemini-tools.sse", None),
    "openai-responses": ({"provider": "openai", "model": "gpt-5"}, "openai-responses-tools.json", "openai-responses-tools.sse", None),
}


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def agent_for(sess: lls.Session, renderer: str) -> lls.Agent:
    a = lls.Agent(sess, {"config": PROVIDERS[renderer][0], "system": "Be brief.", "tools": [READ_FILE]})
    a.set_renderer(renderer)
    return a


def calls_of(rec: Any) -> list:
    return [(c.id, c.name, c.arguments) for c in rec]


# -- 1. tool calls as data --------------------------------------------------------------------


@pytest.mark.parametrize("renderer", sorted(PROVIDERS))
@pytest.mark.parametrize("streamed", [False, True])
def test_record_body_and_record_stream_give_the_tool_calls_as_data(renderer: str, streamed: bool) -> None:
    _, body, stream, want = PROVIDERS[renderer]
    if streamed:
        with lls.Stream(renderer) as s:
            expected = lls.tool_calls(s.consume([(DATA / stream).read_bytes()]))
    else:
        expected = lls.tool_calls(lls.parse_response(renderer, (DATA / body).read_bytes()))
    assert expected, "every fixture makes tool calls"
    if want is not None:
        assert calls_of(expected) == want
    with lls.Session.memory() as sess, agent_for(sess, renderer) as a:
        a.start_turn("read café.txt")
        a.next_body()
        if streamed:
            with lls.Stream(renderer) as s:
                for at in range(0, len(raw := (DATA / stream).read_bytes()), 5):
                    s.feed(raw[at : at + 5])
                rec = a.record_stream(s)
        else:
            rec = a.record_body((DATA / body).read_bytes())
        assert rec.finish_reason == "tool-calls" and rec.tool_call_count == len(expected)
        assert rec.tool_calls == expected
        assert rec.tool_calls is rec.tool_calls  # read once, on first access
        for c in rec.tool_calls:
            assert a.record_tool_result({"callId": c.id, "text": "contents"}) >= 1
        # The ids answered are the ones the log holds: the next request carries the results.
        env = a.next_request().envelope
        results = [b["toolCallId"] for m in env["messages"] for b in m["content"] if b["type"] == "tool-result"]
        assert results == [c.id for c in expected]


def test_a_reply_without_calls_reads_nothing_and_calls_are_read_while_the_session_is_open() -> None:
    sess = lls.Session.memory()
    with agent_for(sess, "openai") as a:
        a.start_turn("hi")
        a.next_body()
        plain = a.record_body(json.dumps({"choices": [{"message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]}))
        assert plain.tool_calls == [] and plain.tool_call_count == 0
        a.end_turn()
        a.start_turn("read it")
        a.next_body()
        late = a.record_body((DATA / "openai-chat-tools.json").read_bytes())
    sess.close()
    assert late.tool_call_count == 2
    with pytest.raises(lls.InvalidHandleError):
        late.tool_calls  # the session it would read them from is closed
    assert plain.tool_calls == []


def test_tool_calls_of_messages_events_and_lists_and_arguments_that_are_not_json() -> None:
    def call(id: str, args: str) -> dict:
        return {"type": "tool-call", "id": id, "name": "f", "arguments": args}

    msg = {"role": "assistant", "content": [{"type": "text", "text": "x"}, call("a", '{"n": 1}'), call("b", ""), call("c", "{nope")]}
    calls = lls.tool_calls(msg)
    assert [c.id for c in calls] == ["a", "b", "c"]
    assert calls[0].arguments == {"n": 1} and calls[1].arguments == {}  # no arguments: {}
    with pytest.raises(ValueError, match=r"tool call c \(f\): its arguments are not JSON"):
        calls[2].arguments
    assert calls[2].arguments_json == "{nope"
    assert lls.tool_calls({"message": msg}) == calls == lls.tool_calls(json.dumps([{"message": msg}]))
    assert lls.tool_calls({"role": "user", "content": [{"type": "text", "text": "hi"}]}) == []
    with pytest.raises(lls.InvalidInputError):
        lls.tool_calls({"role": "assistant", "content": [{"type": "tool-call", "id": "x"}]})  # no name
    with pytest.raises(lls.MalformedJsonError):
        lls.tool_calls("{not json")


# -- 2. Python values and SDK objects where JSON goes ----------------------------------------


def logged(sess: lls.Session, seq: int) -> Dict[str, Any]:
    return sess.events(seq, seq + 1)[0]["data"]


def test_record_body_takes_bytes_str_dicts_views_and_the_sdks_response_objects() -> None:
    raw = (DATA / "openai-chat-tools.json").read_bytes()
    completion = openai.types.chat.ChatCompletion.model_validate_json(raw)
    forms = [raw, raw.decode(), json.loads(raw), bytearray(raw), memoryview(raw), completion]
    seen = []
    for body in forms:
        with lls.Session.memory() as sess, agent_for(sess, "openai") as a:
            a.start_turn("read café.txt")
            a.next_body()
            rec = a.record_body(body)
            seen.append((logged(sess, rec.seq), calls_of(rec.tool_calls), rec.finish_reason))
    assert all(s == seen[0] for s in seen), "every form records the same"
    message = anthropic.types.Message.model_validate_json((DATA / "anthropic-tools.json").read_bytes())
    with lls.Session.memory() as sess, agent_for(sess, "anthropic") as a:
        a.start_turn("read café.txt")
        a.next_body()
        assert calls_of(a.record_body(message).tool_calls) == PROVIDERS["anthropic"][3]


class Dumped:
    """An object that serialises itself as a pydantic model does (model_dump_json)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def model_dump_json(self, **kw: Any) -> str:
        assert kw == {"by_alias": True, "exclude_unset": True}  # the wire's names, set fields
        return json.dumps(self.value)


def test_record_response_and_other_json_arguments_take_python_values_and_sdk_objects() -> None:
    response = {"message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}, "usage": {"inputTokens": 3, "outputTokens": 1}}
    with lls.Session.memory() as sess, lls.Agent(sess, {"config": {"provider": "test", "model": "m"}}) as a:
        for value in (response, json.dumps(response), json.dumps(response).encode(), Dumped(response)):
            a.start_turn("hi")
            a.next_request()
            seq = a.record_response(value)
            assert logged(sess, seq)["message"]["content"] == response["message"]["content"]
            a.end_turn()
        # Nested: an SDK object inside a dict (here a tool's parameter schema).
        a.set_options({"config": {"provider": "test", "model": "m"}, "tools": [dict(READ_FILE, parameters=Dumped(READ_FILE["parameters"]))]})
        a.start_turn("hi")
        assert a.next_request().envelope["tools"][0]["parameters"] == READ_FILE["parameters"]
        a.end_turn("aborted")
        with pytest.raises(TypeError, match=r"Object of type object is not JSON serializable \(a JSON argument is"):
            a.record_response({"message": object()})
        with pytest.raises(TypeError, match="not JSON serializable"):
            a.record_body(object())


# -- 3. a body handed to an SDK method -------------------------------------------------------


def test_sdk_kwargs_sends_the_body_through_openai_with_the_servers_fields_in_extra_body(server: Server) -> None:
    raw = (DATA / "openai-chat-tools.json").read_bytes()
    server.answer(raw)
    client = openai.OpenAI(api_key="local", base_url=server.url + "/v1", max_retries=0)
    create = client.chat.completions.create
    with lls.Session.memory() as sess, agent_for(sess, "openai") as a:
        a.start_turn("read café.txt")
        body = a.next_body()
        with pytest.raises(TypeError, match="cache_prompt"):
            create(**json.loads(body.body))  # what the issue saw: the SDK refuses a server's field
        kw = lls.sdk_kwargs(create, body)
        assert kw["extra_body"] == {"cache_prompt": True} and "cache_prompt" not in kw
        completion = create(**kw)
        assert server.last() == json.loads(body.body), "the SDK sent what the body holds"
        rec = a.record_body(completion)
        assert calls_of(rec.tool_calls) == PROVIDERS["openai"][3]
        # The raw-response form takes the same arguments; its bytes are the provider's own.
        for c in rec.tool_calls:
            a.record_tool_result({"callId": c.id, "text": "x"})
        body = a.next_body()
        server.answer(b'{"choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}')
        raw_reply = client.chat.completions.with_raw_response.create(**lls.sdk_kwargs(create, body.body))
        assert server.last() == json.loads(body.body)
        last = a.record_body(raw_reply.http_response.content)
        assert last.tool_calls == [] and last.finish_reason == "stop"
    with pytest.raises(TypeError, match="has no extra_body parameter"):
        lls.sdk_kwargs(print, {"model": "m"})
    with pytest.raises(TypeError, match="a provider body is a JSON object"):
        lls.sdk_kwargs(create, b"[1]")


def test_sdk_kwargs_with_anthropic_messages_create(server: Server) -> None:
    server.answer((DATA / "anthropic-tools.json").read_bytes())
    client = anthropic.Anthropic(api_key="local", base_url=server.url, max_retries=0)
    with lls.Session.memory() as sess, agent_for(sess, "anthropic") as a:
        a.start_turn("read café.txt")
        body = a.next_body()
        kw = lls.sdk_kwargs(client.messages.create, json.loads(body.body))
        assert "extra_body" not in kw  # every field of this body is a parameter of the SDK
        rec = a.record_body(client.messages.create(**kw))
        assert server.last() == json.loads(body.body)
        assert calls_of(rec.tool_calls) == PROVIDERS["anthropic"][3]


def test_genai_gives_the_raw_body_when_asked(server: Server) -> None:
    server.answer((DATA / "gemini-tools.json").read_bytes())
    client = genai.Client(api_key="local", http_options=genai_types.HttpOptions(base_url=server.url))
    with lls.Session.memory() as sess, agent_for(sess, "gemini") as a:
        a.start_turn("read café.txt")
        body = json.loads(a.next_body().body)
        resp = client.models.generate_content(
            model="gemini-2.5-flash",
            contents=body["contents"],
            config={"system_instruction": body["systemInstruction"], "should_return_http_response": True},
        )
        assert server.requests[-1][0].endswith("/models/gemini-2.5-flash:generateContent")
        assert server.last()["contents"] == body["contents"]
        rec = a.record_body(resp.sdk_http_response.body)
        assert rec.tool_calls == lls.tool_calls(lls.parse_response("gemini", (DATA / "gemini-tools.json").read_bytes()))


# -- 4. the SDKs' raw streams ----------------------------------------------------------------


def test_openai_streaming_response_bytes_feed_the_stream(server: Server) -> None:
    sse = (DATA / "openai-chat-tools.sse").read_bytes()
    server.answer(sse, "text/event-stream")
    client = openai.OpenAI(api_key="local", base_url=server.url + "/v1", max_retries=0)
    create = client.chat.completions.create
    with lls.Session.memory() as sess, agent_for(sess, "openai") as a:
        a.start_turn("read café.txt")
        body = a.next_body()
        kw = lls.sdk_kwargs(create, body)
        deltas = []
        with client.chat.completions.with_streaming_response.create(**kw, stream=True, stream_options={"include_usage": True}) as resp:
            with lls.Stream("openai") as s:
                for chunk in resp.iter_bytes():
                    s.feed(chunk)
                    deltas += s.deltas()
                rec = a.record_stream(s)
        assert server.last() == dict(json.loads(body.body), stream=True, stream_options={"include_usage": True})
        assert calls_of(rec.tool_calls) == PROVIDERS["openai"][3] and rec.finish_reason == "tool-calls"
        text = lls.parse_response("openai", (DATA / "openai-chat-tools.json").read_bytes())["message"]["content"][0]["text"]
        assert "".join(d.get("text", "") for d in deltas if d["type"] == "text") == text
        # The SDK's parsed stream hands out chunk objects: refused with the way to the raw bytes.
        for c in rec.tool_calls:
            a.record_tool_result({"callId": c.id, "text": "x"})
        parsed = create(**lls.sdk_kwargs(create, a.next_body()), stream=True)
        with lls.Stream("openai") as s:
            with pytest.raises(TypeError, match="feed the raw bytes of the response instead"):
                s.feed(next(iter(parsed)))
        parsed.close()
        a.end_turn("aborted")


def test_anthropic_streaming_response_bytes_feed_the_stream(server: Server) -> None:
    server.answer((DATA / "anthropic-tools.sse").read_bytes(), "text/event-stream")
    client = anthropic.Anthropic(api_key="local", base_url=server.url, max_retries=0)
    with lls.Session.memory() as sess, agent_for(sess, "anthropic") as a:
        a.start_turn("read café.txt")
        body = a.next_body()
        with client.messages.with_streaming_response.create(**lls.sdk_kwargs(client.messages.create, body), stream=True) as resp:
            with lls.Stream("anthropic") as s:
                for chunk in resp.iter_bytes():
                    s.feed(chunk)
                rec = a.record_stream(s)
        assert server.last() == dict(json.loads(body.body), stream=True)
        assert calls_of(rec.tool_calls) == PROVIDERS["anthropic"][3]


def test_openai_responses_streaming_response_bytes_feed_the_stream(server: Server) -> None:
    server.answer((DATA / "openai-responses-tools.sse").read_bytes(), "text/event-stream")
    client = openai.OpenAI(api_key="local", base_url=server.url + "/v1", max_retries=0)
    with lls.Session.memory() as sess, agent_for(sess, "openai-responses") as a:
        a.start_turn("read café.txt")
        body = a.next_body()
        kw = lls.sdk_kwargs(client.responses.create, body)
        with client.responses.with_streaming_response.create(**kw, stream=True) as resp:
            with lls.Stream("openai-responses") as s:
                for chunk in resp.iter_bytes():
                    s.feed(chunk)
                rec = a.record_stream(s)
        assert server.requests[-1][0] == "/v1/responses"
        assert server.last() == dict(json.loads(body.body), stream=True)
        with lls.Stream("openai-responses") as s:
            want = lls.tool_calls(s.consume([(DATA / "openai-responses-tools.sse").read_bytes()]))
        assert rec.tool_calls == want and want
