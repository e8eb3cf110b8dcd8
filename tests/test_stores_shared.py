"""Shared speculative results over the in-memory backend: who may share, what is served, and what never is."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought import Effect, FakeClock, Policy, Runtime, ToolCall, tool
from forethought.errors import ToolDefinitionError
from forethought.stores.errors import StoreIntegrityError
from forethought.stores.events import StoreEvent
from forethought.stores.results import MemorySharedResults, SharedResults
from forethought.stores.sealing import NotShareable, Sealer, decode, encode
from forethought.stores.shared_tools import SharedPolicy, SharedSpeculation, SharedTool

SECRET = b"s" * 32


class Search:
    """A public lookup: the same answer for every caller; counts its real runs."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, q: str) -> dict[str, Any]:
        self.runs.append(q)
        if self.gate is not None:
            await self.gate.wait()
        return {"q": q, "hits": [q.upper(), len(q)], "score": 0.5}


def search_tool(fn: Any, name: str = "search", effect: Effect = Effect.READ_ONLY, **options: Any) -> Any:
    return tool(fn, name=name, effect=effect, threaded=False,
                parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                **options)


def worker(backend: SharedResults, search: Any, tenant: str = "acme", clock: FakeClock | None = None,
           events: list[StoreEvent] | None = None, policy: SharedPolicy | None = None,
           ) -> tuple[SharedSpeculation, Any]:
    shared = SharedSpeculation(backend, SECRET, tenant, policy or SharedPolicy({"search": SharedTool(ttl_s=30)}),
                               clock=clock or FakeClock(), on_event=None if events is None else events.append)
    runtime = Runtime([shared.wrap(search_tool(search))], Policy())
    return shared, runtime.session()


async def speculate_and_claim(shared: SharedSpeculation, session: Any, q: str) -> Any:
    call = ToolCall("search", {"q": q})
    assert shared.speculate(session, call).status == "launched"
    await session.wait_speculations(5.0)
    outcome = await session.execute_detailed(call)
    assert outcome.kind == "hit"
    return outcome.value


async def test_a_second_worker_is_served_what_the_first_computed_and_it_equals_serial() -> None:
    backend, search = MemorySharedResults(), Search()
    a, session_a = worker(backend, search)
    b, session_b = worker(backend, search)
    first = await speculate_and_claim(a, session_a, "redis")
    await a.drain()
    second = await speculate_and_claim(b, session_b, "redis")
    assert search.runs == ["redis"]
    assert first == second == await Search()("redis")
    assert first is not second  # each caller gets its own copy
    assert (a.stats.led, a.stats.published, b.stats.served) == (1, 1, 1)


async def test_tenants_never_see_each_others_results() -> None:
    backend, search = MemorySharedResults(), Search()
    a, session_a = worker(backend, search, tenant="acme")
    b, session_b = worker(backend, search, tenant="globex")
    await speculate_and_claim(a, session_a, "q")
    await a.drain()
    await speculate_and_claim(b, session_b, "q")
    assert search.runs == ["q", "q"]
    assert b.stats.served == 0


async def test_identical_guesses_in_two_workers_run_once_single_flight() -> None:
    backend, search = MemorySharedResults(), Search()
    search.gate = asyncio.Event()
    a, session_a = worker(backend, search)
    b, session_b = worker(backend, search)
    call = ToolCall("search", {"q": "x"})
    assert a.speculate(session_a, call).status == "launched"
    await asyncio.sleep(0.01)  # A leads and is running
    assert b.speculate(session_b, call).status == "launched"
    await asyncio.sleep(0.01)  # B waits on A's result
    search.gate.set()
    values = [await session_a.execute(call), await session_b.execute(call)]
    assert search.runs == ["x"]
    assert values[0] == values[1] == {"q": "x", "hits": ["X", 1], "score": 0.5}
    assert b.stats.waited_served == 1


async def test_authoritative_results_are_published_without_waiting_for_the_backend() -> None:
    backend, search = MemorySharedResults(), Search()
    a, session_a = worker(backend, search)
    b, session_b = worker(backend, search)
    assert await a.execute(session_a, ToolCall("search", {"q": "k"})) == {"q": "k", "hits": ["K", 1], "score": 0.5}
    await a.drain()
    await speculate_and_claim(b, session_b, "k")
    assert search.runs == ["k"]


async def test_values_expire_on_the_clock() -> None:
    backend_clock = FakeClock()
    backend, search = MemorySharedResults(backend_clock), Search()
    a, session_a = worker(backend, search)
    b, session_b = worker(backend, search)
    await speculate_and_claim(a, session_a, "t")
    await a.drain()
    backend_clock.advance(31.0)
    await speculate_and_claim(b, session_b, "t")
    assert search.runs == ["t", "t"]


async def test_a_forged_value_is_refused_and_the_call_runs_locally() -> None:
    backend, search = MemorySharedResults(), Search()
    events: list[StoreEvent] = []
    a, session_a = worker(backend, search)
    b, session_b = worker(backend, search, events=events)
    await speculate_and_claim(a, session_a, "f")
    await a.drain()
    key = a.storage_key("search\x1f" + '{"q":"f"}')
    forged = Sealer(b"attacker-secret!" * 2).seal(key, encode({"q": "f", "hits": ["EVIL"], "score": 1.0}))
    backend.tamper(key, forged)
    value = await speculate_and_claim(b, session_b, "f")
    assert value == {"q": "f", "hits": ["F", 1], "score": 0.5}
    assert [e.kind for e in events] == ["rejected"]
    assert search.runs == ["f", "f"]


async def test_large_and_non_json_values_are_never_published() -> None:
    backend = MemorySharedResults()

    async def big(q: str) -> str:
        return q * 1000

    async def tupled(q: str) -> Any:
        return (q, {1, 2}) if q == "set" else (q,)

    policy = SharedPolicy({"big": SharedTool(max_value_bytes=100), "tupled": SharedTool()})
    shared = SharedSpeculation(backend, SECRET, "acme", policy, clock=FakeClock())
    session = Runtime([shared.wrap(search_tool(big, name="big")),
                       shared.wrap(search_tool(tupled, name="tupled"))]).session()
    for name in ("big", "tupled"):
        call = ToolCall(name, {"q": "set"})
        shared.speculate(session, call)
        await session.wait_speculations(5.0)
        value = await session.execute(call)
        assert value == ("set" * 1000 if name == "big" else ("set", {1, 2}))
    await shared.drain()
    assert (shared.stats.too_large, shared.stats.not_shareable, shared.stats.published) == (1, 1, 0)
    assert await backend.get(shared.storage_key("big\x1f" + '{"q":"set"}')) is None


def test_private_stateful_writing_or_threaded_tools_are_never_shared() -> None:
    shared = SharedSpeculation(MemorySharedResults(), SECRET, "acme",
                               SharedPolicy({name: SharedTool() for name in ("p", "pa", "w", "th", "v")}))

    async def fn(q: str) -> str:
        return q

    cases = [search_tool(fn, name="w", effect=Effect.DESTRUCTIVE),
             search_tool(fn, name="v", validator=lambda call: 1),
             tool(lambda q: q, name="th", effect=Effect.READ_ONLY, threaded=True)]
    private = search_tool(fn, name="p")
    object.__setattr__(private, "private", True)
    private_args = search_tool(fn, name="pa")
    object.__setattr__(private_args, "private_arguments", frozenset({"q"}))
    for t in [*cases, private, private_args]:
        with pytest.raises(ToolDefinitionError):
            shared.wrap(t)
    unmarked = search_tool(fn, name="other")
    assert shared.wrap(unmarked) is unmarked


class HangingBackend(MemorySharedResults):
    async def get(self, key: str) -> bytes | None:
        await asyncio.sleep(3600)
        return None


async def test_a_hanging_backend_degrades_to_local_once_and_authoritative_calls_never_touch_it() -> None:
    search, events, clock = Search(), [], FakeClock()
    shared, session = worker(HangingBackend(), search, clock=clock, events=events,
                             policy=SharedPolicy({"search": SharedTool()}, op_timeout_s=0.02, retry_after_s=5.0))
    assert await session.execute(ToolCall("search", {"q": "auth"})) is not None  # plain execute: no backend
    for q in ("a", "b", "c"):
        await speculate_and_claim(shared, session, q)
    assert [e.kind for e in events] == ["degraded"]
    assert shared.stats.unavailable == 1 and shared.stats.local == 3
    assert search.runs == ["auth", "a", "b", "c"]


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                           | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                           max_leaves=20)


@settings(max_examples=60)
@given(json_values)
def test_shared_values_decode_to_exactly_themselves(value: Any) -> None:
    def typed(v: Any) -> Any:
        if isinstance(v, dict):
            return ("d", sorted((k, typed(x)) for k, x in v.items()))
        if isinstance(v, list):
            return ("l", [typed(x) for x in v])
        return (type(v).__name__, repr(v))

    assert typed(decode(encode(value))) == typed(value)


@given(st.sampled_from([(1,), {1}, {1: "a"}, float("nan"), b"x", [1, (2,)]]))
def test_values_that_would_change_type_are_not_shareable(value: Any) -> None:
    with pytest.raises(NotShareable):
        encode(value)


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=0))
def test_any_changed_byte_or_key_fails_authentication(payload: bytes, position: int) -> None:
    sealer = Sealer(SECRET)
    sealed = bytearray(sealer.seal("k", payload))
    assert sealer.open("k", bytes(sealed)) == payload
    with pytest.raises(StoreIntegrityError):
        sealer.open("other", bytes(sealed))
    sealed[position % len(sealed)] ^= 0x01
    with pytest.raises(StoreIntegrityError):
        sealer.open("k", bytes(sealed))


async def test_a_failed_leader_lets_the_waiter_take_over_and_failures_never_surface() -> None:
    backend = MemorySharedResults()
    gate, runs = asyncio.Event(), []

    async def flaky(q: str) -> dict[str, Any]:
        runs.append(q)
        if len(runs) == 1:
            await gate.wait()
            raise RuntimeError("the leader's run fails")
        return {"q": q}

    a, session_a = worker(backend, search_tool(flaky).fn)
    b, session_b = worker(backend, search_tool(flaky).fn)
    call = ToolCall("search", {"q": "z"})
    a.speculate(session_a, call)
    await asyncio.sleep(0.01)
    b.speculate(session_b, call)
    await asyncio.sleep(0.01)
    gate.set()
    await session_b.wait_speculations(5.0)
    assert await session_b.execute(call) == {"q": "z"}  # B took the lease over and ran it itself
    assert await session_a.execute(call) == {"q": "z"}  # A's failed speculation never surfaces: a miss
    assert runs == ["z", "z", "z"]
    assert (b.stats.led, b.stats.local) == (1, 0)


calls_strategy = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(["a", "b", "c"]), st.booleans()),
                          min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(calls_strategy)
async def test_random_interleavings_of_two_workers_give_serial_outputs(plan: list[tuple[int, str, bool]]) -> None:
    backend, search = MemorySharedResults(), Search()
    workers = [worker(backend, search), worker(backend, search)]
    for who, q, guess in plan:
        shared, session = workers[who]
        call = ToolCall("search", {"q": q})
        if guess:
            shared.speculate(session, call)
            shared.speculate(session, ToolCall("search", {"q": q + "-wrong"}))
            await asyncio.sleep(0)
        value = await shared.execute(session, call)
        assert value == await Search()(q)
        session.end_turn()
    for shared, _ in workers:
        await shared.close()
