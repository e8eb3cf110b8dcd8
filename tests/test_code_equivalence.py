"""Every benchmark program, streamed through the code predictor and run speculatively, gives plain
execution's output, error, tool-call sequence and sent messages; and the mechanisms score the hits."""

from __future__ import annotations

import pytest

from forethought import Effect, Tool, tool
from forethought.bench.code.runner import run_forethought, run_serial
from forethought.bench.code.stream import schedule
from forethought.bench.code.suite import SUITE, program
from forethought.code.predictor import CodeMode
from forethought.sandbox import ObjectState
from test_code_support import run_plain, stream_and_run

FAST_RATE = 4000.0
FAST_LATENCY_S = 0.005
SETTLE_S = 30.0
"""How long a test lets the shadow catch up before the real run: which calls hit is then the mechanism's doing,
not this machine's speed (a bound, never waited out when the shadow is done)."""


@pytest.mark.parametrize("name", [p.name for p in SUITE])
async def test_suite_program_equals_plain_execution(name: str) -> None:
    p = program(name)
    plan = schedule(p.message, FAST_RATE)
    serial = await run_serial(p, plan, FAST_LATENCY_S)
    speculative = await run_forethought(p, plan, FAST_LATENCY_S)
    assert speculative.signature == serial.signature
    assert speculative.stdout == serial.stdout and speculative.error == serial.error
    assert speculative.outbox == serial.outbox


@pytest.mark.parametrize(("name", "calls"), [("map_loop", 8), ("map_chain", 12), ("dependent_chain", 4),
                                             ("while_pages", 5), ("nested_def", 8), ("mixed_dependencies", 5)])
async def test_streamed_programs_are_served_by_predictions(name: str, calls: int) -> None:
    p = program(name)
    run = await run_forethought(p, schedule(p.message, 400.0), 0.03, settle_s=SETTLE_S)
    assert (run.hits, run.misses) == (calls, 0)


async def test_any_import_is_speculated_in_the_isolated_worker() -> None:
    p = program("unsafe_import")  # `import os`: the OS boundary, not an import list, keeps it harmless
    run = await run_forethought(p, schedule(p.message, 400.0), 0.03, settle_s=SETTLE_S)
    assert (run.hits, run.misses) == (6, 0)  # spec-ptc stops its whole shadow at `import os`: 0 hits


async def test_isolated_writes_are_speculated_on_snapshots_and_commit_in_order() -> None:
    def cart_tools(state: ObjectState) -> list[Tool]:
        def add_item(cart: dict, name: str) -> int:
            cart["items"].append(name)
            return len(cart["items"])

        return [tool(add_item, effect=Effect.ISOLATED_WRITE, state=state)]

    code = 'n = add_item("apple")\nm = add_item("pear")\nprint(n, m)'
    speculative_state = ObjectState({"items": []})
    streamed = await stream_and_run(code, cart_tools(speculative_state), mode=CodeMode.WHOLE)
    plain_state = ObjectState({"items": []})
    plain = await run_plain(code, cart_tools(plain_state))
    assert streamed.results[0].signature() == plain.signature()
    assert speculative_state.live == plain_state.live == {"items": ["apple", "pear"]}
    assert streamed.results[0].calls[0].kind == "hit"  # the first write ran early, on a snapshot, and committed
