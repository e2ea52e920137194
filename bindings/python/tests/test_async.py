"""The asyncio form: async def callbacks run on the event loop, agent operations are awaitable,
and cancelling the awaiting task trips the operation's cancel token."""

from __future__ import annotations

import asyncio
from typing import Any, List

import pytest

import llmsession as lls
from conftest import CONFIG, assistant

NOTE = {"role": "user", "content": [{"type": "text", "text": "from the loop"}]}


def test_async_callbacks_run_on_the_loop_while_the_library_waits() -> None:
    ticks: List[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def listener(i: Any) -> Any:
            assert asyncio.get_running_loop() is loop
            await asyncio.sleep(0.02)
            return [NOTE] + i["rest"]

        async def summariser(i: Any) -> Any:
            await asyncio.sleep(0)
            return {"text": "async summary"}

        async def ticker() -> None:
            for n in range(5):
                ticks.append(n)
                await asyncio.sleep(0.001)

        with lls.Session.memory() as s:
            async with lls.AsyncAgent.create(s, CONFIG) as a:
                a.add_prefix_listener(listener)
                a.set_summariser(summariser)
                a.start_turn("hi")
                t = asyncio.ensure_future(ticker())
                r = await a.next_request()
                await t
                assert r.info["prefixLen"] == 1
                a.record_response(assistant("ok " * 50))
                a.end_turn()
                a.start_turn("again")
                out = await a.compact()
                assert out["outcome"] == "landed"
                assert (await a.measure())["counter"]

    asyncio.run(main())
    assert ticks == [0, 1, 2, 3, 4]


def test_an_async_callback_error_and_a_cancelled_task() -> None:
    async def main() -> None:
        stopped = asyncio.Event()

        async def fails(_i: Any) -> Any:
            raise lls.CallbackError("async no")

        async def forever(_i: Any) -> Any:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                stopped.set()
                raise

        with lls.Session.memory() as s:
            a = lls.AsyncAgent(lls.Agent(s, CONFIG))
            a.add_prefix_listener(fails)
            a.start_turn("hi")
            with pytest.raises(lls.ListenerError, match="async no"):
                await a.next_request()
            await a.dispose()
            a.close()
            with lls.AsyncAgent.create(s, CONFIG) as b:
                b.add_prefix_listener(forever)
                b.start_turn("hi")
                task = asyncio.ensure_future(b.next_request())
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert s.events()[-1]["data"]["reason"] == "aborted"
                await asyncio.wait_for(stopped.wait(), 5)  # the abandoned callback was cancelled

    asyncio.run(main())


def test_a_coroutine_callback_outside_the_asyncio_form_runs_to_completion() -> None:
    async def listener(i: Any) -> Any:
        await asyncio.sleep(0)
        return i["rest"]

    with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
        a.add_prefix_listener(listener)
        a.start_turn("hi")
        assert a.next_request().info["prefixLen"] == 0


def test_a_plain_call_on_the_loop_thread_refuses_its_async_callbacks_clearly() -> None:
    async def listener(i: Any) -> Any:
        return i["rest"]

    async def main() -> None:
        with lls.Session.memory() as s, lls.Agent(s, CONFIG) as a:
            a.add_prefix_listener(listener)
            a.start_turn("hi")
            with pytest.raises(RuntimeError, match="use AsyncAgent"):
                a.next_request()

    asyncio.run(main())
