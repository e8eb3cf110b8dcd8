"""An agent run twice, serially and with speculation: the same transcript, less waiting.

The model is scripted (``FakeLLMClient``) and made to take time per streamed event, like a real model
generating tokens; the tools sleep like slow backends. A small custom predictor guesses the next call from
the user's message and the calls so far. With ``speculate=True`` its guesses run while the model is still
generating, and the model's own calls claim them; ``speculate=False`` is the serial baseline through the
same code path. The example checks that both transcripts are identical and prints the time saved.

Run: ``.venv/bin/python examples/agent_fake_model.py`` (a few seconds, no network).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from forethought import (
    Agent,
    AgentResult,
    Effect,
    FakeLLMClient,
    ObservedCall,
    Prediction,
    PredictionContext,
    Runtime,
    ToolCall,
    scripted_message,
    tool,
)

TOOL_S = 0.3
"""Seconds each tool call takes."""
EVENT_S = 0.06
"""Seconds the model takes per streamed event (about 0.3 s per message)."""


@tool(effect=Effect.READ_ONLY)
async def get_weather(city: str) -> dict[str, Any]:
    """Current weather in a city."""
    await asyncio.sleep(TOOL_S)
    return {"city": city, "sky": "cloudy", "celsius": 14}


@tool(effect=Effect.READ_ONLY)
async def get_forecast(city: str, days: int = 3) -> dict[str, Any]:
    """Chance of rain for the next days."""
    await asyncio.sleep(TOOL_S)
    return {"city": city, "rain": [0.2, 0.7, 0.4][:days]}


def respond(request: Any) -> Sequence[Any]:
    """The scripted model: weather first, then the forecast, then an answer built from both outputs."""
    outputs = [m["content"] for m in request.messages if m["role"] == "tool"]
    if not outputs:
        return scripted_message("Let me look.", [ToolCall("get_weather", {"city": "Paris"})])
    if len(outputs) == 1:
        return scripted_message("", [ToolCall("get_forecast", {"city": "Paris", "days": 3})])
    return scripted_message(f"Now: {outputs[0]}. Next days: {outputs[1]}. Take an umbrella.")


class SlowModel:
    """An LLM client: the scripted model, taking ``EVENT_S`` per event as a generating model would."""

    def __init__(self) -> None:
        self._fake = FakeLLMClient(respond=respond)

    async def stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     **extra: Any) -> AsyncIterator[Any]:
        async for event in self._fake.stream(model, messages, tools, **extra):
            await asyncio.sleep(EVENT_S)
            yield event


class NextCallGuesser:
    """A predictor: after nothing, the weather of the city the user names; after the weather, its forecast."""

    name = "next-call-guesser"

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        found = re.search(r"\bin ([A-Z][a-z]+)", context.user_message)
        if found is None:
            return []
        city = found.group(1)
        done = {observed.call.name for observed in context.history}
        if "get_weather" not in done:
            return [Prediction(ToolCall("get_weather", {"city": city}), 0.9, self.name)]
        if "get_forecast" not in done:
            return [Prediction(ToolCall("get_forecast", {"city": city}), 0.8, self.name)]
        return []

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """This guesser learns nothing; a real one would count what followed what."""


async def run(speculate: bool) -> tuple[AgentResult, float]:
    runtime = Runtime([get_weather, get_forecast])
    agent = Agent(SlowModel(), "scripted", [get_weather, get_forecast], runtime, speculate=speculate,
                  predictors=[NextCallGuesser()])
    start = time.perf_counter()
    result = await agent.run([{"role": "user", "content": "What is the weather in Paris this week?"}])
    elapsed = time.perf_counter() - start
    await agent.close()
    runtime.close()
    return result, elapsed


async def main() -> None:
    serial, serial_s = await run(speculate=False)
    fast, fast_s = await run(speculate=True)
    assert fast.messages == serial.messages, "speculation changed the transcript"
    print(f"answer: {fast.final_text}")
    for record in fast.tool_records:
        print(f"  {record.call.name}: {record.outcome}" + (f" (served by {record.source})" if record.source else ""))
    print(f"serial {serial_s:.2f}s, speculative {fast_s:.2f}s: {1 - fast_s / serial_s:.0%} of the time saved, "
          f"identical transcripts ({len(fast.messages)} messages)")


if __name__ == "__main__":
    asyncio.run(main())
