"""Code speculation: the tool calls inside streamed code start while the code is still streaming.

Agents whose action is Python code (CodeAct style) put their tool calls inside the code. Here the model's
message streams at a fixed rate; the code predictor runs each closed statement early in an isolated shadow
worker, where every tool call becomes a speculation. When the message ends, ``CodeExecutor`` runs the code
for real through the session: calls claim the shadow's speculations, independent calls overlap. The
baseline, ``PlainExecutor``, runs the same code after the message ends, one call after another. Both runs
must print the same thing. (Where the OS cannot isolate the shadow worker, speculation turns itself off
with one warning and only the overlap of independent calls remains.)

Run: ``.venv/bin/python examples/code_mode.py`` (a few seconds, no network).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from forethought import CodeExecutor, CodePredictor, Effect, ExecResult, PlainExecutor, Runtime, Tool, tool

TOOL_S = 0.25
"""Seconds each tool call takes."""
CHARS_PER_S = 600.0
"""How fast the model streams its message (about 150 tokens per second)."""

MESSAGE = '''I'll fetch the three prices and compare them.

```python
a = price("apples")
b = price("pears")
c = price("plums")
cheapest = min([("apples", a), ("pears", b), ("plums", c)], key=lambda item: item[1])
print("cheapest:", cheapest[0], cheapest[1])
```
'''


@tool(effect=Effect.READ_ONLY)
async def price(fruit: str) -> float:
    """The price of a fruit, from a slow price service."""
    await asyncio.sleep(TOOL_S)
    return {"apples": 2.5, "pears": 3.0, "plums": 1.75}[fruit]


async def stream(message: str, feed: Any) -> None:
    """Hand ``message`` over in small deltas at ``CHARS_PER_S``, as a streaming model would."""
    for i in range(0, len(message), 8):
        feed(message[i:i + 8])
        await asyncio.sleep(8 / CHARS_PER_S)


def code_of(message: str) -> str:
    return message.split("```python\n", 1)[1].split("```", 1)[0]


async def plain(tools: list[Tool]) -> tuple[ExecResult, float]:
    start = time.perf_counter()
    await stream(MESSAGE, lambda delta: None)
    result = await PlainExecutor(tools, {}).run(code_of(MESSAGE))
    return result, time.perf_counter() - start


async def speculative(tools: list[Tool]) -> tuple[ExecResult, float]:
    runtime = Runtime(tools)
    session = runtime.session()
    namespace: dict[str, Any] = {}
    predictor = CodePredictor()
    start = time.perf_counter()
    turn = predictor.begin(session, namespace)
    await stream(MESSAGE, turn.feed)
    blocks = turn.finish()
    executor = CodeExecutor(session, namespace, link=turn.link)
    results = [await executor.run(block.code) for block in blocks]
    elapsed = time.perf_counter() - start
    await turn.close()
    session.end_turn()
    await session.close()
    runtime.close()
    return results[0], elapsed


async def main() -> None:
    serial, serial_s = await plain([price])
    fast, fast_s = await speculative([price])
    assert (fast.stdout, fast.error) == (serial.stdout, serial.error), "speculation changed what the code did"
    print(f"the code printed: {fast.stdout.strip()}")
    print("its calls: " + ", ".join(f"{c.call.describe()} {c.kind}" for c in fast.calls))
    print(f"plain {serial_s:.2f}s, with code speculation {fast_s:.2f}s "
          f"(message streaming alone takes {len(MESSAGE) / CHARS_PER_S:.2f}s)")


if __name__ == "__main__":
    asyncio.run(main())
