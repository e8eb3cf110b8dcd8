"""OpenAI Agents SDK adapter: the framework's own Runner against the scripted loopback engine.

Serial (``speculate=False``) and speculative runs through the same framework code give the same final
output and tool outputs; in the speculative run the reads were started from the stream and claimed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed (forethought[integrations])")

import openai  # noqa: E402
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel  # noqa: E402
from agents.models.openai_responses import OpenAIResponsesModel  # noqa: E402

from adapter_tools import lookup_and_note_session, patterns_in_tmp  # noqa: E402, F401 - patterns_in_tmp: a fixture
from forethought import Session  # noqa: E402
from forethought.integrations import ForethoughtModel, agents_tools  # noqa: E402
from forethought.serve.http import serve_in_process  # noqa: E402
from forethought.serve.scripted import create_scripted_server, parse_script  # noqa: E402

agents.set_tracing_disabled(True)

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


async def _run(url: str, api: str, speculate: bool) -> tuple[str, list[Any], list[str], Any]:
    session, ran = _session()
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    inner = (OpenAIResponsesModel("m", client) if api == "responses"
             else OpenAIChatCompletionsModel("m", client))
    agent = agents.Agent(name="weather", instructions="Be brief.", tools=agents_tools(session),
                         model=ForethoughtModel(inner, session, speculate=speculate))
    result = await agents.Runner.run(agent, "Weather in Oslo and Lima?")
    outputs = [item.output for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"]
    stats = session.stats()
    await session.close()
    return str(result.final_output), outputs, ran, stats


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_runner_serial_equals_speculative(server: str, api: str) -> None:
    serial_text, serial_outputs, serial_ran, serial_stats = await _run(server, api, speculate=False)
    text, outputs, ran, stats = await _run(server, api, speculate=True)
    assert text == serial_text == "Oslo and Lima are both 24."
    assert outputs == serial_outputs
    assert len(outputs) == 3
    assert set(ran) == set(serial_ran) and ran.count("note:both 24") == 1  # the write once; reads may be guessed
    assert serial_stats.hits == 0 and stats.hits == 2


async def test_streamed_run_passes_events_through(server: str) -> None:
    session, _ = _session()
    client = openai.AsyncOpenAI(base_url=server + "/v1", api_key="x", max_retries=0)
    agent = agents.Agent(name="weather", tools=agents_tools(session),
                         model=ForethoughtModel(OpenAIResponsesModel("m", client), session))
    result = agents.Runner.run_streamed(agent, "Weather?")
    kinds = [event.type async for event in result.stream_events()]
    assert "raw_response_event" in kinds
    assert result.final_output == "Oslo and Lima are both 24."
    assert session.stats().hits == 2
    await session.close()


# --- the SDK's own behaviour, with and without forethought ---------------------------------------------------
#
# Each test below runs the same plain functions twice: as the SDK builds them (``function_tool``) and
# through forethought (``agents_tools`` + ``ForethoughtModel``), and asserts that the SDK (and the model
# behind it) sees exactly the same thing.

import json  # noqa: E402
from typing import Literal  # noqa: E402

from agents import function_tool  # noqa: E402

from adapter_tools import RecordingApp, Rendezvous, paint  # noqa: E402
from forethought import Effect, Runtime, tool  # noqa: E402


async def weather(city: str, units: Literal["c", "f"] = "c", days: int = 1) -> dict[str, Any]:
    """Weather of a city.

    Args:
        city: The city's name.
        units: Celsius or Fahrenheit.
        days: How many days ahead.
    """
    return {"zone": "CET", "city": city, "temp": 24 if units == "c" else 75, "days": days}


def tags(names: list[str], note: str | None = None) -> list[Any]:
    """Tags, sorted (a sync tool returning a list)."""
    return [sorted(names), note]


def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"no such place: {reason}")


def plain(text: str) -> str:
    """Echoes (a string result)."""
    return text.upper()


FUNCTIONS = [weather, tags, fail, plain]
EFFECTS = {"weather": Effect.READ_ONLY, "tags": Effect.PURE, "fail": Effect.READ_ONLY, "plain": Effect.PURE}
STEP = {"ttft_s": 0.0, "chunk_s": 0.0, "fragment_chars": 9, "responses": [
    {"calls": [{"name": "weather", "arguments": {"city": "Oslo"}},
               {"name": "weather", "arguments": {"city": "Lima", "units": "f", "days": 2}},
               {"name": "tags", "arguments": {"names": ["b", "a"], "note": None}},
               {"name": "fail", "arguments": {"reason": "Atlantis"}},
               {"name": "plain", "arguments": {"text": "hi"}}]},
    {"text": "Done."}]}


def _forethought_session(functions: list[Any]) -> Session:
    return Runtime().session(tools=[tool(f, effect=EFFECTS.get(f.__name__, Effect.READ_ONLY)) for f in functions])


def _tools(mode: str, functions: list[Any], **options: Any) -> tuple[list[Any], Session | None]:
    if mode == "native":
        return [function_tool(f, **options) for f in functions], None
    session = _forethought_session(functions)
    return agents_tools(session, **options), session


@pytest.mark.parametrize("options", [{}, {"strict_mode": False}])
def test_tools_are_the_sdks_own_function_tools(options: dict[str, Any]) -> None:
    native, _ = _tools("native", FUNCTIONS, **options)
    ours, _ = _tools("forethought", FUNCTIONS, **options)
    fields = [(t.name, t.description, t.params_json_schema, t.strict_json_schema) for t in native]
    assert [(t.name, t.description, t.params_json_schema, t.strict_json_schema) for t in ours] == fields
    assert all(t.strict_json_schema == options.get("strict_mode", True) for t in ours)


async def _model_saw(mode: str, api: str, speculate: bool = True, **options: Any) -> tuple[Any, list[Any]]:
    recorder = RecordingApp(create_scripted_server(parse_script(STEP)))
    async with serve_in_process(recorder) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        inner = OpenAIResponsesModel("m", client) if api == "responses" else OpenAIChatCompletionsModel("m", client)
        tools, session = _tools(mode, FUNCTIONS, **options)
        model = inner if session is None else ForethoughtModel(inner, session, speculate=speculate)
        agent = agents.Agent(name="a", tools=tools, model=model)
        try:
            result: Any = await agents.Runner.run(agent, "Weather?")
        except Exception as exc:  # compared across modes
            result = (type(exc), str(exc), type(exc.__cause__))
        finally:
            await client.close()
            if session is not None:
                await session.close()
    if not isinstance(result, tuple):
        result = str(result.final_output)
    return result, [_visible(body) for body in recorder.bodies[1:]]  # what the model was sent after the tools


def _visible(body: dict[str, Any]) -> dict[str, Any]:
    """What the model is shown: the request without its transport options (``ForethoughtModel`` always
    streams) and without the server's own item ids (a streamed response numbers its items differently)."""
    shown = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    for key in ("input", "messages"):
        if key in shown:
            shown[key] = [{k: v for k, v in item.items() if k != "id"} for item in shown[key]]
    return shown


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_the_model_sees_outputs_and_errors_as_without_forethought(api: str) -> None:
    native = await _model_saw("native", api)
    assert native[0] == "Done."
    for speculate in (False, True):
        assert await _model_saw("forethought", api, speculate) == native
    sent = json.dumps(native[1])
    assert "An error occurred while running the tool" in sent  # the SDK's generic message ...
    assert "no such place" not in sent  # ... and never the tool's own error text
    assert "{'zone': 'CET', 'city': 'Oslo'" in sent  # the SDK renders a dict with str()


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_without_a_failure_function_the_run_raises_as_without_forethought(api: str) -> None:
    native = await _model_saw("native", api, failure_error_function=None)
    assert native[0][0] is agents.UserError and native[0][2] is ValueError
    assert await _model_saw("forethought", api, failure_error_function=None) == native


@pytest.mark.parametrize("mode", ["native", "forethought"])
async def test_parallel_calls_run_at_once_with_the_models_ids(mode: str) -> None:
    meeting = Rendezvous(3)

    async def probe(n: int) -> dict[str, Any]:
        """Meets the other calls."""
        return {"n": n, "met": await meeting.meet()}

    script = {"ttft_s": 0.0, "chunk_s": 0.0, "responses": [
        {"calls": [{"name": "probe", "arguments": {"n": n}} for n in range(3)]}, {"text": "ok"}]}
    recorder = RecordingApp(create_scripted_server(parse_script(script)))
    async with serve_in_process(recorder) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        tools, session = _tools(mode, [probe])
        model: Any = OpenAIResponsesModel("m", client)
        chosen = model if session is None else ForethoughtModel(model, session)
        agent = agents.Agent(name="a", tools=tools, model=chosen)
        result = await agents.Runner.run(agent, "go")
        await client.close()
    assert meeting.met == [True, True, True]
    outputs = [(item["call_id"], item["output"]) for item in recorder.bodies[1]["input"]
               if item.get("type") == "function_call_output"]
    calls = [item["call_id"] for item in recorder.bodies[1]["input"] if item.get("type") == "function_call"]
    assert [call_id for call_id, _ in outputs] == calls and len(calls) == 3
    assert [o for _, o in outputs] == [str({"n": n, "met": True}) for n in range(3)]
    assert result.final_output == "ok"


async def _run_fields(mode: str, api: str, functions: list[Any], script: dict[str, Any]) -> dict[str, Any]:
    """What a non-streamed run reports of the model's responses and the tools' outputs."""
    async with serve_in_process(create_scripted_server(parse_script(script))) as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        inner = OpenAIResponsesModel("m", client) if api == "responses" else OpenAIChatCompletionsModel("m", client)
        tools, session = _tools(mode, functions)
        model = inner if session is None else ForethoughtModel(inner, session)
        result = await agents.Runner.run(agents.Agent(name="a", tools=tools, model=model), "go")
        await client.close()
        if session is not None:
            await session.close()
    usage = result.context_wrapper.usage
    return {"output": result.final_output, "tokens": (usage.input_tokens, usage.output_tokens, usage.total_tokens),
            "last_response_id": result.last_response_id,
            "response_ids": [r.response_id for r in result.raw_responses],
            "tool_outputs": [item.output for item in result.new_items if type(item).__name__ == "ToolCallOutputItem"]}


PAINT = {"ttft_s": 0.0, "chunk_s": 0.0, "responses": [
    {"calls": [{"name": "paint", "arguments": {"colour": "red", "at": {"x": 1, "y": 2}, "on": "2024-01-02"}}]},
    {"text": "Done."}]}


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_run_reports_usage_ids_and_framework_values_as_without_forethought(api: str) -> None:
    native = await _run_fields("native", api, [paint], PAINT)
    assert native["tool_outputs"] == ["<Colour.RED: 'red'> at Point(x=1, y=2) on datetime.date(2024, 1, 2)"]
    assert await _run_fields("forethought", api, [paint], PAINT) == native
