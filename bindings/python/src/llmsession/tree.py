"""Agent trees: child agents spawned from a parent's open tool call (or at a turn boundary),
whose first request reads the parent's cache, and their answers given back as the parent's
tool results (docs/caching.md, "Agent trees"; ``lls_agent_spawn``, ``lls_agent_finish_child``).

:meth:`Agent.spawn` and :meth:`Agent.finish_child` are these functions; with asyncio,
:meth:`AsyncAgent.spawn` gives an :class:`AsyncAgent` child and
``await parent.finish_child(child)`` runs off the event loop, so children run as tasks of
their own (``asyncio.gather``).
"""

from __future__ import annotations

import json
from ctypes import byref, c_void_p
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple, cast

from . import _native as N
from ._runtime import call, call_out, dumps
from .session import Session
from .types import ChildOutcome

if TYPE_CHECKING:  # pragma: no cover
    from .agent import Agent, MessageLike

#: The result text a child sees for each of its parent's open tool calls (its own included)
#: unless ``placeholder`` is given: one constant, so that siblings share everything up to their
#: directives.
DEFAULT_PLACEHOLDER = "This tool call is being worked on by another agent; its result is not shown here."


def spawn(
    parent: "Agent",
    directive: "MessageLike",
    call_id: Optional[str] = None,
    **options: Any,
) -> Tuple[Session, "Agent"]:
    """Spawns a child of ``parent`` answering its open tool call ``call_id`` (None: at a turn
    boundary) with ``directive`` (a str or a user message). ``options`` are the other spawn
    options: ``placeholder``, ``id``, ``durability``, ``path``, ``url``, ``cacheTtl`` ("5m" or
    "1h"), ``maxTurns``. Returns the child's session and agent (close both)."""
    from .agent import Agent, user_message

    o: Dict[str, Any] = dict(options)
    o["directive"] = user_message(directive)
    if call_id is not None:
        o["callId"] = call_id
    b = dumps(o)
    cs = c_void_p()
    ca = c_void_p()
    call(N.lib.lls_agent_spawn, parent.ptr, b, len(b), byref(cs), byref(ca))
    session = Session(cs.value or 0)
    child = Agent.__new__(Agent)
    Agent._adopt(child, ca.value or 0, session)
    return session, child


def finish_child(parent: "Agent", child: "Agent", error: Optional[str] = None) -> ChildOutcome:
    """Ends ``child``'s open turn (completed; with ``error``, failed) and records its answer as
    ``parent``'s result of the call it answers, with the child's id. Results are logged in call
    order: ``recorded`` is 0 while an earlier call of the same message still waits."""
    o: Optional[Mapping[str, Any]] = None if error is None else {"error": error}
    b = None if o is None else json.dumps(o).encode()
    raw = call_out(N.lib.lls_agent_finish_child, parent.ptr, child.ptr, b, 0 if b is None else len(b))
    return cast(ChildOutcome, json.loads(raw or b"null"))


def wake(session: Session, options: Optional[Mapping[str, Any]] = None) -> "Agent":
    """An agent over ``session`` that sends what its last request carried (its latest request
    header): a child woken in another process keeps its parent's model, tools, system and
    session prefix. ``options``: ``{"checkRequests"?, "policy"?, "tokenizer"?}``."""
    from .agent import Agent

    return Agent(session, dict(options or {}))
