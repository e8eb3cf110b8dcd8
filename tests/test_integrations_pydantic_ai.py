"""pydantic-ai adapter: the framework's own Agent, TappedModel and ForethoughtToolset against loopback.

Serial (``speculate=False``) and speculative runs through the same framework code give the same output
and tool returns; in the speculative run the reads were started from the stream and claimed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pydantic_ai = pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (forethought[integrations])")

import openai  # noqa: E402
from pydantic_ai.messages import ToolReturnPart  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

from adapter_tools import lookup_and_note_session, patterns_in_tmp  # noqa: E402, F401 - patterns_in_tmp: a fixture
from forethought import Session  # noqa: E402
from forethought.integrations import ForethoughtToolset, TappedModel  # noqa: E402
from forethought.serve.http import serve_in_process  # noqa: E402
from forethought.serve.scripted import create_scripted_server, parse_script  # noqa: E402

SCRIPT = {"ttft_s": 0.0, "chunk_s": 0.001, "fragment_chars": 6, "responses": [
    {"text": "", "calls": [{"name": "lookup", "arguments": {"city": "Oslo"}},
                           {"name": "lookup", "arguments": {"city": "Lima"}}]},
    {"text": "", "calls": [{"name": "note", "arguments": {"text": "both 24"}}]},
    {"text": "Oslo and Lima are both 24."}]}


def _session() -> tuple[Session, list[str]]:
    return lookup_and_note_session()


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with serve_in_process(create_scripted_server(parse_script(SCRIPT))) as url:
        yield url


async def _run(url: str, speculate: bool) -> tuple[str, list[Any], list[str], Any]:
    session, ran = _session()
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    model = TappedModel(OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client)), session,
                        speculate=speculate)
    agent = pydantic_ai.Agent(model, toolsets=[ForethoughtToolset.of(session)])
    result = await agent.run("Weather in Oslo and Lima?")
    returns = [part.content for message in result.all_messages() for part in message.parts
               if isinstance(part, ToolReturnPart)]
    stats = session.stats()
    await session.close()
    return str(result.output), returns, ran, stats


async def test_agent_serial_equals_speculative(server: str) -> None:
    serial_text, serial_returns, serial_ran, serial_stats = await _run(server, speculate=False)
    text, returns, ran, stats = await _run(server, speculate=True)
    assert text == serial_text == "Oslo and Lima are both 24."
    assert returns == serial_returns
    assert returns == [{"city": "Oslo", "temp": 24}, {"city": "Lima", "temp": 24}, "ok"]
    assert set(ran) == set(serial_ran) and ran.count("note:both 24") == 1  # the write once; reads may be guessed
    assert serial_stats.hits == 0 and stats.hits == 2


# --- pydantic-ai's own behaviour, with and without forethought -------------------------------------------------
#
# The same plain functions as pydantic-ai's own tools (``Agent(tools=[...])``) and through forethought
# (``TappedModel`` + ``ForethoughtToolset.of``): the model is sent the same messages, the run raises the
# same exception, a ``ModelRetry`` makes the same retry.

import json  # noqa: E402
from typing import Literal  # noqa: E402

from pydantic_ai import ModelRetry  # noqa: E402
from pydantic_ai.tools import Tool as PydanticTool  # noqa: E402

from adapter_tools import RecordingApp, Rendezvous, paint  # noqa: E402
from forethought import Effect, Runtime, tool  # noqa: E402


async def weather(city: str, units: Literal["c", "f"] = "c", days: int = 1) -> dict[str, Any]:
    """Weather of a city.

    Args:
        city: The city's name.
        units: Celsius or Fahrenheit.
    """
    return {"zone": "CET", "city": city, "temp": 24 if units == "c" else 75, "days": days}


def tags(names: list[str], note: str | None = None) -> list[Any]:
    """Tags, sorted (a sync tool returning a list)."""
    return [sorted(names), note]


class Flaky:
    """A tool that asks the model to retry once (``ModelRetry``), then answers."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, city: str) -> str:
        """Forecast of a city (asks for a retry the first time)."""
        self.calls += 1
        if self.calls == 1:
            raise ModelRetry(f"{city} is ambiguous: say which country")
        return f"sunny in {city}"


def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"no such place: {reason}")




def _forethought_session(functions: list[Any]) -> Session:
    """The functions as forethought tools: reads, but ``forecast`` (whose answer changes: not a read)."""
    return Runtime().session(tools=[tool(f, effect=Effect.DESTRUCTIVE if f.__name__ == "forecast"
                                         else Effect.READ_ONLY) for f in functions])


def _functions() -> list[Any]:
    flaky = Flaky()

    def forecast(city: str) -> str:
        """Forecast of a city (asks for a retry the first time)."""
        return flaky(city)

    return [weather, tags, forecast, fail, paint]


def _script(*steps: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {"ttft_s": 0.0, "chunk_s": 0.0, "fragment_chars": 7, "responses": [
        *({"calls": [{"name": n, "arguments": a} for n, a in step]} for step in steps), {"text": "Done."}]}


SCRIPTS = {
    "outputs": _script([("weather", {"city": "Oslo"}), ("weather", {"city": "Lima", "units": "f"}),
                        ("tags", {"names": ["b", "a"], "note": None})]),
    "retry": _script([("forecast", {"city": "Paris"})], [("forecast", {"city": "Paris, France"})]),
    "raises": _script([("weather", {"city": "Oslo"}), ("fail", {"reason": "Atlantis"})]),
    "invalid-arguments": _script([("weather", {"city": "Oslo", "days": "many"})], [("weather", {"city": "Oslo"})]),
    "framework-values": _script([("paint", {"colour": "red", "at": {"x": 1, "y": 2}, "on": "2024-01-02"})],
                                [("paint", {"colour": "red", "at": {"x": 1, "y": 2}, "on": "2024-01-02"})]),
}


async def _model_saw(mode: str, script: str, speculate: bool = True) -> tuple[Any, list[Any]]:
    recorder = RecordingApp(create_scripted_server(parse_script(SCRIPTS[script])))
    functions = _functions()
    async with serve_in_process(recorder) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        model: Any = OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client))
        session: Session | None = None
        if mode == "native":
            agent: Any = pydantic_ai.Agent(model, tools=functions)
        else:
            session = _forethought_session(functions)
            agent = pydantic_ai.Agent(TappedModel(model, session, speculate=speculate),
                                      toolsets=[ForethoughtToolset.of(session)])
        try:
            result: Any = str((await agent.run("Weather?")).output)
        except Exception as exc:  # compared across modes
            result = (type(exc), str(exc))
        finally:
            await client.close()
            if session is not None:
                await session.close()
    return result, [_visible(body) for body in recorder.bodies[1:]]


def _visible(body: dict[str, Any]) -> list[Any]:
    """The messages the model was sent (the request's transport options aside: TappedModel streams)."""
    return body["messages"]


def test_tools_are_built_as_pydantic_ai_builds_them() -> None:
    functions = _functions()
    session = _forethought_session(functions)
    ours = [t.tool_def for t in ForethoughtToolset.of(session).wrapped.tools.values()]  # type: ignore[attr-defined]
    assert ours == [PydanticTool(f).tool_def for f in functions]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
async def test_the_model_sees_and_the_run_raises_as_without_forethought(script: str) -> None:
    native = await _model_saw("native", script)
    for speculate in (False, True):
        assert await _model_saw("forethought", script, speculate) == native
    if script == "raises":
        assert native[0] == (ValueError, "no such place: Atlantis")
    if script == "retry":
        assert "say which country" in json.dumps(native[1])


@pytest.mark.parametrize("mode", ["native", "forethought"])
async def test_calls_of_one_response_run_at_once_with_the_models_ids(mode: str) -> None:
    meeting = Rendezvous(3)

    async def probe(n: int) -> dict[str, Any]:
        """Meets the other calls."""
        return {"n": n, "met": await meeting.meet()}

    recorder = RecordingApp(create_scripted_server(parse_script(_script([("probe", {"n": n}) for n in range(3)]))))
    async with serve_in_process(recorder) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        model: Any = OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client))
        if mode == "native":
            agent: Any = pydantic_ai.Agent(model, tools=[probe])
        else:
            session = Runtime().session(tools=[tool(probe, effect=Effect.READ_ONLY)])
            agent = pydantic_ai.Agent(TappedModel(model, session), toolsets=[ForethoughtToolset.of(session)])
        assert (await agent.run("go")).output == "Done."
        await client.close()
    assert meeting.met == [True, True, True]
    sent = recorder.bodies[1]["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    outputs = [(m["tool_call_id"], json.loads(m["content"])) for m in sent if m["role"] == "tool"]
    assert outputs == [(call_id, {"n": n, "met": True}) for n, call_id in enumerate(calls)]
