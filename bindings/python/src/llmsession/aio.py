"""The asyncio form: :class:`AsyncAgent`, whose operations are awaitable.

Each operation that may run callbacks (``next_request``, ``next_body``, ``compact``, ``compact_idle``,
``provider_error``, ``measure``, ``dispose``) runs the library call on an executor thread
(``loop.run_in_executor``), so the event loop stays free. A callback that is an ``async def``
(or returns any awaitable) is scheduled on the loop (``asyncio.run_coroutine_threadsafe``):
the trampoline answers ``LLS_CB_PENDING`` and the reply is completed when the coroutine
finishes, while the library waits on the executor thread. Cancelling the awaiting task trips
the operation's cancel token; the task then waits for the library call to return before the
``asyncio.CancelledError`` propagates; a callback coroutine still running then is cancelled.
Every other method is the plain :class:`Agent` method.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

from ._runtime import run_with_loop
from .agent import Agent, Body, Request
from .cancel import Cancel
from .session import Session
from .types import AgentOptions, ChildOutcome, CompactionOutcome


class AsyncAgent:
    """Wraps an :class:`Agent` (``AsyncAgent(agent)`` or ``AsyncAgent.create(session,
    options)``); ``async with`` closes it."""

    def __init__(self, agent: Agent, executor: Optional[concurrent.futures.Executor] = None) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"AsyncAgent wraps an Agent, got {type(agent).__name__}")
        self.agent = agent
        self._executor = executor

    @classmethod
    def create(cls, session: Session, options: Union[AgentOptions, Mapping[str, Any]]) -> "AsyncAgent":
        return cls(Agent(session, options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.agent, name)

    async def _run(self, fn: Callable[..., Any], *args: Any, cancel: Optional[Cancel] = None, cancellable: bool = True) -> Any:
        loop = asyncio.get_running_loop()
        own = Cancel() if cancellable and cancel is None else None
        token = cancel if own is None else own
        kw: Dict[str, Any] = {"cancel": token} if cancellable else {}
        fut = loop.run_in_executor(self._executor, functools.partial(run_with_loop, loop, fn, *args, **kw))
        try:
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                if token is not None:
                    token.trip()
                await asyncio.wait([fut])  # the library call returns (cancelled, or done)
                if not fut.cancelled():
                    fut.exception()  # retrieved: the task's cancellation is what propagates
                raise
        finally:
            if own is not None:
                if fut.done():
                    own.close()
                else:  # pragma: no cover - the call still runs: free the token when it returns
                    fut.add_done_callback(lambda _f: own.close())

    async def next_request(self, cancel: Optional[Cancel] = None) -> Request:
        return await self._run(self.agent.next_request, cancel=cancel)  # type: ignore[no-any-return]

    async def next_body(self, cancel: Optional[Cancel] = None) -> Body:
        return await self._run(self.agent.next_body, cancel=cancel)  # type: ignore[no-any-return]

    async def compact(self, span: Optional[Sequence[int]] = None, cancel: Optional[Cancel] = None) -> CompactionOutcome:
        return await self._run(self.agent.compact, span, cancel=cancel)  # type: ignore[no-any-return]

    async def compact_idle(self, cancel: Optional[Cancel] = None) -> CompactionOutcome:
        """The compaction the cache clock decided (it calls the summariser)."""
        return await self._run(self.agent.compact_idle, cancel=cancel)  # type: ignore[no-any-return]

    async def provider_error(self, error: Union[str, Mapping[str, Any]], cancel: Optional[Cancel] = None) -> bool:
        return await self._run(self.agent.provider_error, error, cancel=cancel)  # type: ignore[no-any-return]

    def spawn(self, directive: Any, call_id: Optional[str] = None, **options: Any) -> "Tuple[Session, AsyncAgent]":
        """Spawns a child (as :meth:`Agent.spawn`) and returns its session and an
        :class:`AsyncAgent` over it, sharing this one's executor: run each child as a task of
        its own and ``await parent.finish_child(child)`` when it is done."""
        session, child = self.agent.spawn(directive, call_id, **options)
        return session, AsyncAgent(child, self._executor)

    async def finish_child(self, child: Union["AsyncAgent", Agent], error: Optional[str] = None) -> ChildOutcome:
        """Records the child's answer as this agent's tool result (as
        :meth:`Agent.finish_child`), off the event loop: children finish in any order."""
        c = child.agent if isinstance(child, AsyncAgent) else child
        return await self._run(self.agent.finish_child, c, error, cancellable=False)  # type: ignore[no-any-return]

    async def measure(self) -> Dict[str, Any]:
        return await self._run(self.agent.measure, cancellable=False)  # type: ignore[no-any-return]

    async def dispose(self) -> None:
        await self._run(self.agent.dispose, cancellable=False)

    def close(self) -> None:
        self.agent.close()

    def __enter__(self) -> "AsyncAgent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "AsyncAgent":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.dispose()
        self.close()
