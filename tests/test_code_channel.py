"""The channel from a worker cannot stall the host (issue 27, "the host can be stalled through the channel").

A worker (or model code that found the channel's socket and writes frames of its own) may send anything.
Decoding is linear in the frame whatever it holds: set members and dict keys chosen to collide in hash are
refused before a table is built, a frame's JSON values are bounded before it is parsed, and frames are
handled in bounded slices per wake-up of the event loop. A worker that sends an oversized or malformed frame
is killed and its turn stops speculating; the real run then equals plain exec. (How long the loop stalls is
measured by ``python -m forethought.bench.code.looplag``, not asserted here.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.code import wire
from forethought.code.worker.pool import isolation_available
from test_code_support import FAST_LIMITS, ToolLog, make_tools, run_plain, shadow_only, stream_and_run
from test_code_worker import _values

_WHY = isolation_available(FAST_LIMITS)
needs_isolation = pytest.mark.skipif(_WHY is not None, reason=f"no OS isolation here: {_WHY}")
P = (1 << 61) - 1  # hash(n) == hash(n + k * P) for every int n


# --- the decoder: colliding members are refused before any table is built ---------------------------------

def _colliding(n: int) -> dict[str, list[Any]]:
    """Encoded members that all share one hash value, of many kinds."""
    return {
        "ints": [k * P for k in range(n)],
        "negative_ints": [-k * P - 5 for k in range(n)],
        "big_ints": [7 + k * P * (1 << 80) for k in range(n)],
        "int_tuples": [{"tuple": [k * P, 1]} for k in range(n)],
        "nested_tuples": [{"tuple": [{"tuple": [k * P]}]} for k in range(n)],
        "floats": [3.0 * 2.0 ** (61 * k) for k in range(n)],  # 2 ** 61 == 1 modulo P
        "frozensets": [{"frozenset": [k * P]} for k in range(n)],
    }


@pytest.mark.parametrize("kind", sorted(_colliding(1)))
@pytest.mark.parametrize("container", ["set", "frozenset", "dict"])
def test_members_chosen_to_collide_in_hash_are_refused(kind: str, container: str) -> None:
    members = _colliding(wire.MAX_SAME_HASH + 1)[kind]
    data = {"dict": [[m, 0] for m in members]} if container == "dict" else {container: members}
    with pytest.raises(wire.NotData, match="collide"):
        wire.decode(data)
    nested = [0, {"tuple": [data]}]  # anywhere in a value
    with pytest.raises(wire.NotData, match="collide"):
        wire.decode(nested)


@pytest.mark.parametrize("container", ["set", "frozenset", "dict"])
def test_honest_members_that_happen_to_share_a_hash_still_decode(container: str) -> None:
    members: list[Any] = [-1, -2, 0, P, 1.5, {"tuple": [-1]}, {"tuple": [-2]}]  # hash(-1) == hash(-2)
    data = {"dict": [[m, i] for i, m in enumerate(members)]} if container == "dict" else {container: members}
    value = wire.decode(data)
    assert len(value) == len(members)


def _json_values(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(_json_values(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(1 + _json_values(v) for v in value.values())
    return 1


@settings(max_examples=200, deadline=None)
@given(_values, st.text(max_size=20))
def test_the_token_bound_bounds_every_frame_s_json_values(value: Any, text: str) -> None:
    data = wire.frame({"op": "call", "id": 1, "tool": text, "args": [wire.encode(value)], "kwargs": {"dict": []},
                       "note": text})[wire.HEADER_SIZE:]
    assert _json_values(json.loads(data)) <= wire.token_bound(data)


def test_results_sent_into_the_worker_are_bounded() -> None:
    with pytest.raises(wire.NotData):
        wire.encode(list(range(100)), max_nodes=50)
    with pytest.raises(wire.NotData):
        wire.encode(["x" * 1000] * 10, max_bytes=5000)
    with pytest.raises(wire.NotData):
        wire.encode([b"x" * 3000] * 2, max_bytes=5000)
    assert wire.encode(["x" * 1000] * 4, max_bytes=5000) == ["x" * 1000] * 4


# --- a worker writing frames of its own ----------------------------------------------------------------------

_FIND_CHANNEL = ("import gc, json, socket, struct\n"
                 "chan = [o for o in gc.get_objects() if isinstance(o, socket.socket) and o.fileno() >= 0][0]\n"
                 "def send_raw(body):\n    chan.sendall(struct.pack('!I', len(body)) + body)\n"
                 "def send(message):\n    send_raw(json.dumps(message).encode())\n")
P_TEXT = str(P)
_ENDING = {  # frames that end the worker: (program, words the reason has)
    "too_many_values": ("send_raw(b'[' + b'0,' * 100000 + b'0]')", "too many values"),
    "too_many_values_in_a_call": ("send({'op': 'call', 'id': 1, 'tool': 'fetch', 'args': [[0] * 30000], "
                                  "'kwargs': {'dict': []}})", "too many values"),
    "too_long": ("chan.sendall(struct.pack('!I', 1 << 30))", "oversized"),
    "not_json": ("send_raw(b'{oops')", "malformed"),
    "not_an_object": ("send([1, 2])", "malformed"),
    "unknown_op": ("send({'op': 'exec', 'code': 'print(1)'})", "malformed"),
    "bad_id": ("send({'op': 'call', 'id': 'x', 'tool': 'fetch', 'args': [], 'kwargs': {'dict': []}})",
               "malformed"),
    "bad_seq": ("send({'op': 'idle', 'seq': [1]})", "malformed"),
    "deep_json": ("send_raw(b'[' * 100000 + b']' * 100000)", "too many values"),
}


@needs_isolation
@pytest.mark.parametrize("name", sorted(_ENDING))
async def test_an_oversized_or_malformed_frame_ends_the_worker_and_only_its_turn(name: str) -> None:
    program, words = _ENDING[name]
    log = ToolLog()
    phase = await shadow_only(_FIND_CHANNEL + program, log)
    assert phase.ended is not None and words in phase.ended, phase.ended
    assert any("ended early" in n for n in phase.notes)
    code = "x = fetch('after')\nprint(x)"
    streamed = await stream_and_run(code, make_tools())  # the next turn speculates again
    plain = await run_plain(code, make_tools())
    assert streamed.results[0].signature() == plain.signature() and streamed.hits == 1


_REFUSED_CALLS = {  # well-formed frames whose arguments are refused: the call is not speculated
    "colliding_set": "{'set': [k * P for k in range(5000)]}",
    "colliding_dict_keys": "{'dict': [[k * P, 0] for k in range(5000)]}",
    "colliding_tuples": "{'set': [{'tuple': [k * P]} for k in range(3000)]}",
    "colliding_frozensets": "{'frozenset': [{'frozenset': [k * P]} for k in range(3000)]}",
    "unknown_tag": "{'object': ['os', 'system']}",
}


@needs_isolation
@pytest.mark.parametrize("name", sorted(_REFUSED_CALLS))
async def test_calls_with_colliding_or_unknown_members_are_refused_and_the_worker_goes_on(name: str) -> None:
    log = ToolLog()
    forged = (f"P = {P_TEXT}\nsend({{'op': 'call', 'id': 10 ** 6, 'tool': 'fetch', 'args': [{_REFUSED_CALLS[name]}],"
              f" 'kwargs': {{'dict': []}}, 'source': 'code-shadow'}})")
    phase = await shadow_only(_FIND_CHANNEL + forged, log)
    assert phase.ended is None, phase.ended
    assert any("not data" in n for n in phase.notes), phase.notes
    assert [c[0] for c in log.calls] == ["fetch"] and log.calls[0][1] == ("independent",)


_FLOODS = {  # (program, why the worker is ended)
    "calls": ("for i in range(3000):\n    send({'op': 'call', 'id': 10 ** 6 + i, 'tool': 'fetch', "
              "'args': [f'flood-{i}'], 'kwargs': {'dict': []}, 'source': 'code-shadow'})\n", "too many calls"),
    "idle_notes": ("for i in range(3000):\n"
                   "    send({'op': 'idle', 'seq': 0, 'notes': ['n' * 500] * 50, 'stats': {}})\n", "sent too much"),
    "bytes": ("for i in range(100):\n    send({'op': 'ending', 'why': 'x' * 900000})\n", "sent too much"),
}


@needs_isolation
@pytest.mark.parametrize("name", sorted(_FLOODS))
async def test_a_flood_of_frames_ends_the_worker_within_its_bounds(name: str) -> None:
    program, why = _FLOODS[name]
    log = ToolLog()
    phase = await shadow_only(_FIND_CHANNEL + program, log)
    assert phase.ended is not None and why in phase.ended, phase.ended
    assert len([c for c in log.calls if str(c[1][0]).startswith("flood-")]) <= 512  # the turn's budget held
