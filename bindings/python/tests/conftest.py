"""Shared fixtures: every test must leave no live library handle and no registered callback."""

from __future__ import annotations

import gc
from typing import Iterator

import pytest

import llmsession as lls

CONFIG = {"config": {"provider": "test", "model": "m1"}}
OPENAI_REPLY = (
    b'{"choices":[{"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":14,"completion_tokens":3}}'
)


def assistant(text: str) -> dict:
    return {"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    yield
    gc.collect()
    assert lls.live_handle_count() == 0, "live library handles left"
    assert lls.registered_callback_count() == 0, "callbacks not released"
    assert lls.live_string_count() == 0, "library strings not freed"
