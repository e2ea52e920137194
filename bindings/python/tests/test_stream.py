"""The stream accumulator: each provider's fixture stream, fed in small chunks, gives what
parse_response gives for the non-streamed body; broken streams fail clearly; record_stream."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, List

import pytest

import llmsession as lls
from conftest import CONFIG

DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "stream"
FIXTURES = [
    ("openai", "openai-chat-tools.sse", "openai-chat-tools.json"),
    ("openai", "openai-chat-reasoning.sse", "openai-chat-reasoning.json"),
    ("openai-responses", "openai-responses-tools.sse", "openai-responses-tools.json"),
    ("anthropic", "anthropic-tools.sse", "anthropic-tools.json"),
    ("gemini", "gemini-tools.sse", "gemini-tools.json"),
    ("gemini", "gemini-array.stream.json", "gemini-array.json"),
]


def chunks(b: bytes, size: int) -> Iterator[bytes]:
    for at in range(0, len(b), size):
        yield b[at : at + size]


@pytest.mark.parametrize("fmt,stream,body", FIXTURES)
def test_every_fixture_gives_the_parsed_response(fmt: str, stream: str, body: str) -> None:
    want = lls.parse_response(fmt, (DATA / body).read_bytes())
    deltas: List[dict] = []
    with lls.Stream(fmt) as s:
        got = s.consume(chunks((DATA / stream).read_bytes(), 7), deltas.append)
        assert got == want
        assert lls.parse_response(fmt, s.body()) == want
    assert deltas and all(d["type"] in ("text", "reasoning", "tool-call") for d in deltas)


def test_a_cut_stream_fails_unless_partial_and_garbage_is_malformed() -> None:
    raw = (DATA / "openai-chat-tools.sse").read_bytes()
    with lls.Stream("openai") as s:
        s.feed(raw[: len(raw) // 2])
        with pytest.raises(lls.InvalidInputError) as e:
            s.finish()
        assert e.value.detail["stream"] == "incomplete"
    with lls.Stream("openai") as s:
        s.feed(raw[: len(raw) // 2])
        assert s.finish(partial=True)["finishReason"] == "incomplete"
    with lls.Stream("openai") as s:
        with pytest.raises(lls.MalformedJsonError):
            s.feed(b"data: {nope\n\n")
        with pytest.raises(TypeError):
            s.feed(42)  # type: ignore[arg-type]
    with pytest.raises(lls.InvalidInputError):
        lls.Stream("nope")


def test_record_stream_logs_the_streamed_answer() -> None:
    raw = (DATA / "openai-chat-tools.sse").read_bytes()
    with lls.Session.memory() as sess, lls.Agent(sess, CONFIG) as a:
        a.set_renderer("openai")
        a.start_turn("read the file")
        a.next_body()
        with lls.Stream("openai") as s:
            for c in chunks(raw, 64):
                s.feed(c)
            rec = a.record_stream(s)
        assert [c.name for c in rec.tool_calls] == ["read_file", "list_dir"] and rec.finish_reason == "tool-calls"
        assert any(e["type"] == "tool/call" for e in sess.events())


def test_record_stream_gives_incomplete_for_a_cut_stream_and_refuses_an_empty_one() -> None:
    raw = (DATA / "openai-chat-tools.sse").read_bytes()
    with lls.Session.memory() as sess, lls.Agent(sess, CONFIG) as a:
        a.set_renderer("openai")
        a.start_turn("read the file")
        a.next_body()
        before = sess.events()
        with lls.Stream("openai") as s:
            err = b'data: {"error":{"message":"Overloaded","type":"server_error"}}\n\n'
            with pytest.raises(lls.InvalidInputError):
                s.feed(err)
            # Nothing arrived before the error: no partial message, nothing recorded.
            with pytest.raises(lls.InvalidInputError) as e:
                a.record_stream(s, partial=True)
            assert e.value.detail["stream"] == "provider-error" and e.value.detail["partial"] == "empty"
        assert sess.events() == before
        with lls.Stream("openai") as s:
            s.feed(raw[: len(raw) // 2])
            rec = a.record_stream(s, partial=True)
        assert rec.finish_reason == "incomplete" and rec.seq > 0
