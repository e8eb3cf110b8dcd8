"""Code mode's policy: a code action's independent calls are not serialised behind a cap, and a long program's
later calls are still speculated (issue 27, "defaults that cost hits")."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from forethought import Effect, Policy, Runtime, tool
from forethought.code import CODE_CAPS, code_policy
from forethought.code.executor import CodeExecutor
from forethought.code.predictor import CodeMode, CodePredictor
from forethought.code.worker.pool import isolation_available
from test_code_support import FAST_LIMITS, run_plain, stream_and_run

_WHY = isolation_available(FAST_LIMITS)


def test_code_policy_raises_the_caps_and_keeps_everything_else() -> None:
    base = Policy(min_confidence=0.3, max_concurrent_per_session=2, max_calls_per_turn=1000)
    policy = code_policy(base)
    assert policy.max_concurrent_per_session == CODE_CAPS["max_concurrent_per_session"]
    assert policy.max_calls_per_turn == 1000  # never lowered
    assert policy.min_confidence == 0.3 and policy.max_concurrent >= policy.max_concurrent_per_session
    assert code_policy().max_calls_per_turn >= 256


def _meeting_tools(width: int) -> list[Any]:
    """``meet(i)`` returns only once ``width`` calls are inside it at the same time (else it raises)."""
    barrier = threading.Barrier(width, timeout=5.0)

    def meet(i: str) -> str:
        barrier.wait()
        return f"met {i}"

    return [tool(meet, effect=Effect.PURE)]


WIDE = 12


@pytest.mark.parametrize(("policy", "serialised"), [
    (code_policy(), False), (Policy(), False), (Policy(max_concurrent=16, max_concurrent_per_session=8), True)])
async def test_twelve_independent_calls_of_one_action_run_at_once(policy: Policy, serialised: bool) -> None:
    code = f"out = [meet(str(i)) for i in range({WIDE})]\nprint(len(out), out[-1])"
    rt = Runtime(_meeting_tools(WIDE), policy)
    session = rt.session()
    result = await CodeExecutor(session, {}).run(code)
    session.end_turn()
    await session.close()
    rt.close()
    if serialised:  # 8 at once per session (the defaults of wave 2): the rest wait and the meeting never happens
        assert result.error is not None
    else:
        assert result.error is None and result.stdout == f"{WIDE} met {WIDE - 1}\n"


@pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")
async def test_every_call_of_a_long_program_is_speculated() -> None:
    from test_code_support import make_tools

    code = "\n".join(f"v{i} = fetch('doc-{i}')" for i in range(40)) + "\nprint(v0, v39)"
    tools = make_tools()
    predictor = CodePredictor(mode=CodeMode.WHOLE, limits=FAST_LIMITS)
    streamed = await stream_and_run(code, tools, predictor=predictor, policy=code_policy())
    plain = await run_plain(code, make_tools())
    assert streamed.results[0].signature() == plain.signature()
    assert streamed.hits == 40
