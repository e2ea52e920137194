"""The provider SDKs' calling conventions: a provider body handed to an official SDK's method."""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable, Dict, FrozenSet, Mapping, Union

from .agent import Body

# The SDKs' own options beside the request's fields: never taken from a body.
_SDK_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_known: Dict[Any, FrozenSet[str]] = {}


def _parameters(method: Callable[..., Any]) -> FrozenSet[str]:
    key = getattr(method, "__func__", method)  # a bound method: the function, which lives on
    names = _known.get(key)
    if names is None:
        try:
            params = inspect.signature(method).parameters
        except (TypeError, ValueError) as e:
            raise TypeError(f"sdk_kwargs: cannot read the parameters of {method!r}: {e}") from e
        if "extra_body" not in params:
            raise TypeError(
                f"sdk_kwargs: {getattr(method, '__qualname__', method)!r} has no extra_body parameter "
                "(expected an SDK method such as openai's client.chat.completions.create)"
            )
        names = frozenset(n for n, p in params.items() if p.kind in _KINDS) - _SDK_OPTIONS
        _known[key] = names
    return names


def sdk_kwargs(method: Callable[..., Any], body: Union[Body, bytes, str, Mapping[str, Any]]) -> Dict[str, Any]:
    """The keyword arguments that send ``body`` through an SDK method that takes a request's
    fields as keyword parameters: ``openai``'s ``client.chat.completions.create`` (also its
    ``with_raw_response`` and ``with_streaming_response`` forms), ``anthropic``'s
    ``client.messages.create``. Each field the method has a parameter for is a keyword
    argument; the others (a server's own fields, such as llama.cpp's ``cache_prompt``, or one
    newer than the installed SDK) go under ``extra_body``, which the SDK merges into the JSON it
    sends. So ``create(**sdk_kwargs(create, body))`` sends what ``body`` holds::

        create = client.chat.completions.create
        completion = create(**llmsession.sdk_kwargs(create, agent.next_body()))
        rec = agent.record_body(completion)

    ``body`` is a :class:`Body` (what :meth:`Agent.next_body` gives), its bytes or JSON text,
    or the parsed dict. Add the SDK's own options (``stream=True``, ``timeout``) beside it."""
    if isinstance(body, Body):
        body = body.body
    if isinstance(body, (bytes, bytearray, memoryview, str)):
        fields = json.loads(bytes(body) if isinstance(body, memoryview) else body)
    else:
        fields = dict(body)
    if not isinstance(fields, dict):
        raise TypeError(f"sdk_kwargs: a provider body is a JSON object, got {type(fields).__name__}")
    known = _parameters(method)
    out: Dict[str, Any] = {}
    extra: Dict[str, Any] = {}
    for k, v in fields.items():
        (out if k in known else extra)[k] = v
    if extra:
        out["extra_body"] = extra
    return out
