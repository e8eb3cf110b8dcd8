"""A generated-program fuzz: streamed through the shadow worker and run speculatively, every program prints,
raises and calls exactly what plain exec does.

Each hypothesis example is one assistant message of ten fenced blocks, each block an independent tiny
program (its names prefixed, so blocks cannot see each other): tool calls, loops, conditionals,
comprehensions, helper functions, mutation of tool results, program errors and tool errors, tuples, sets,
big integers and custom objects as arguments. 50 examples make 500 programs per run. Plain runs the same
blocks with :class:`PlainExecutor`, one after another, in one namespace.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought import Effect, Tool, tool
from forethought.code.executor import CodeExecutor
from forethought.code.plain import PlainExecutor
from forethought.code.predictor import CodeMode, CodePredictor
from forethought.code.worker.pool import isolation_available
from test_code_support import FAST_LIMITS, runtime

_WHY = isolation_available(FAST_LIMITS)
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")
BLOCKS_PER_MESSAGE = 10


def fuzz_tools(outbox: list[str], calls: list[str]) -> list[Tool]:
    """fetch/echo (PURE), lookup (PURE, raises KeyError on 'bad' keys), search (READ_ONLY), send (DESTRUCTIVE)."""
    lock = threading.Lock()

    def note(text: str) -> None:
        with lock:
            calls.append(text)

    def fetch(url: str) -> dict[str, Any]:
        note(f"fetch {url!r}")
        return {"url": url, "n": len(url), "tags": ["t", url[:1]]}

    def lookup(key: str) -> int:
        note(f"lookup {key!r}")
        if key.startswith("bad"):
            raise KeyError(key)
        return len(key)

    def echo(value: Any) -> str:
        note(f"echo {type(value).__name__}")
        return f"{type(value).__name__}:{value!r}"

    def search(query: str, k: int = 2) -> list[str]:
        note(f"search {query!r} {k!r}")
        return [f"{query}-{i}" for i in range(k)]

    def send(message: str) -> str:
        note(f"send {message!r}")
        outbox.append(message)
        return f"sent {len(outbox)}"

    return [tool(fetch, effect=Effect.PURE), tool(lookup, effect=Effect.PURE), tool(echo, effect=Effect.PURE),
            tool(search, effect=Effect.READ_ONLY), tool(send, effect=Effect.DESTRUCTIVE)]


_KEYS = st.sampled_from(["a", "bb", "ccc", "bad1", "dd"])
_ARGS = st.sampled_from(["(1, 2)", "[1, 2]", "{3, 1}", "frozenset({'x'})", "2 ** 53 + 1", "3", "3.0", "None",
                         "b'xy'", "{'k': (1,)}", "True", "Box()", "(Box(),)", "'s'"])


@st.composite
def program(draw: st.DrawFn, p: str) -> str:
    """One tiny program; every name it binds starts with ``p``."""
    lines = [f"class {p}Box:\n    def __repr__(self):\n        return 'Box'"]
    names: list[str] = []
    for i in range(draw(st.integers(min_value=1, max_value=5))):
        v = f"{p}v{i}"
        earlier = draw(st.sampled_from(names)) if names else None
        kind = draw(st.integers(min_value=0, max_value=13 if earlier else 8))
        key = draw(_KEYS)
        if kind == 0:
            lines.append(f"{v} = fetch({key!r})")
        elif kind == 1:
            lines.append(f"{v} = lookup({key!r})")
        elif kind == 2:
            lines.append(f"{v} = echo({draw(_ARGS).replace('Box', p + 'Box')})")
        elif kind == 3:
            lines.append(f"{v} = [fetch(k)['n'] for k in [{key!r}, {draw(_KEYS)!r}]]")
        elif kind == 4:
            lines.append(f"{v} = []\nfor {p}k in [{key!r}, 'x']:\n    {v}.append(lookup({p}k))")
        elif kind == 5:
            lines.append(f"try:\n    {v} = lookup({key!r})\nexcept KeyError as {p}e:\n    {v} = str({p}e)")
        elif kind == 6:
            lines.append(f"{v} = send('m{i}')")
        elif kind == 7:
            lines.append(f"def {p}h{i}(x):\n    return fetch(x)['n'] + 1\n{v} = {p}h{i}({key!r})")
        elif kind == 8:
            lines.append(f"{v} = search({key!r}, k={draw(st.integers(0, 3))})")
        elif kind == 9:
            lines.append(f"{v} = echo(str({earlier}))")
        elif kind == 10:
            lines.append(f"if len(str({earlier})) > 4:\n    {v} = fetch('long')\nelse:\n    {v} = fetch('short')")
        elif kind == 11:  # mutate a tool result, then use it
            lines.append(f"{v} = fetch({key!r})\n{v}['url'] = str({earlier})[:3]\n{v} = fetch({v}['url'])")
        elif kind == 12:
            lines.append(f"{v} = 1 / (len(str({earlier})) - len(str({earlier})))")
        else:
            lines.append(f"print({earlier})\n{v} = ({earlier}, {draw(_ARGS).replace('Box', p + 'Box')})")
        names.append(v)
    lines.append(f"print({', '.join(names)})")
    return "\n".join(lines)


@st.composite
def message(draw: st.DrawFn) -> list[str]:
    return [draw(program(f"p{b}_")) for b in range(BLOCKS_PER_MESSAGE)]


def _outcome(result: Any) -> tuple[str, str]:
    return result.stdout, f"{type(result.error).__name__}: {result.error}" if result.error is not None else ""


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(message())
async def test_generated_programs_run_speculatively_as_plain_exec(blocks: list[str]) -> None:
    text = "Let me work.\n" + "".join(f"```python\n{code}\n```\n" for code in blocks)
    outbox, calls = [], []
    rt = runtime(fuzz_tools(outbox, calls))
    session = rt.session()
    namespace: dict[str, Any] = {}
    turn = CodePredictor(mode=CodeMode.FENCED, limits=FAST_LIMITS).begin(session, namespace)
    for i in range(0, len(text), 16):
        turn.feed(text[i:i + 16])
        await asyncio.sleep(0)
    extracted = turn.finish()
    await turn.settle(0.5)
    executor = CodeExecutor(session, namespace, link=turn.link)
    speculative = [await executor.run(block.code) for block in extracted]
    await turn.close()
    session.end_turn()
    await session.close()
    rt.close()

    plain_outbox, plain_calls = [], []
    plain_executor = PlainExecutor(fuzz_tools(plain_outbox, plain_calls), {})
    plain = [await plain_executor.run(code) for code in blocks]
    assert [b.code.rstrip("\n") for b in extracted] == blocks
    for code, got, want in zip(blocks, speculative, plain, strict=True):
        assert _outcome(got) == _outcome(want), code
        assert [c.call.name for c in got.calls] == [c.call.name for c in want.calls], code
    assert outbox == plain_outbox
    authoritative = [c for c in calls if c.startswith("send")]
    assert authoritative == [c for c in plain_calls if c.startswith("send")]
