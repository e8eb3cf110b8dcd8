"""How long anything a hostile shadow worker sends or does stalls the host's event loop.

``python -m forethought.bench.code.looplag [--repeats N] [--json PATH]`` streams one hostile program per
class into a code turn (the shadow only, no real run) while a probe on the same event loop measures how late
a 1 ms ``asyncio.sleep`` wakes. Classes: frames the program forges on the channel's socket (members chosen
to collide in hash, the largest decodable frame, a frame with too many values, a flood of calls and of idle
frames with notes, garbage), a result too large to send back, CPU burns in Python and in C, a memory bomb,
a thread bomb and a disk fill; ``benign`` is an ordinary program, the machine's noise. Repeats are
interleaved by class. Reported per class: the maximum, 99th percentile and median lateness (ms) over every
sample of every repeat, the most CPU the event loop's thread spent between two wake-ups of the probe
(``cpu_max_ms``: the work done on the loop, whatever other processes took the cores meanwhile), and the
load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from forethought._core.policy import Policy
from forethought._core.runtime import Runtime
from forethought._core.tools import Effect, tool
from forethought._version import __version__
from forethought.code.fence import CodeMode
from forethought.code.predictor import CodePredictor
from forethought.code.worker.limits import ShadowLimits

WINDOW_S = 1.5
"""How long the loop is probed after a hostile program is streamed (every class ends or idles within it)."""
P = (1 << 61) - 1
_CHANNEL = ("import gc, json, socket, struct\n"
            "chan = [o for o in gc.get_objects() if isinstance(o, socket.socket) and o.fileno() >= 0][0]\n"
            "def send_raw(body):\n    chan.sendall(struct.pack('!I', len(body)) + body)\n"
            "def send(message):\n    send_raw(json.dumps(message, separators=(',', ':')).encode())\n"
            "def call(i, args):\n    send({'op': 'call', 'id': 10 ** 6 + i, 'tool': 'fetch', 'args': args, "
            "'kwargs': {'dict': []}, 'source': 'code-shadow'})\n")
HOSTILE = {
    "benign": "a = fetch('x')\nb = [fetch(str(i)) for i in range(20)]\n",
    "colliding_set": _CHANNEL + f"call(1, [{{'set': [k * {P} for k in range(19000)]}}])\n",
    "colliding_dict_keys": _CHANNEL + f"call(1, [{{'dict': [[{{'tuple': [k * {P}]}}, 0] for k in range(3000)]}}])\n",
    "largest_decodable_frame": _CHANNEL + "call(1, [[{'tuple': [i]} for i in range(4900)]])\n",
    "too_many_values": _CHANNEL + "send_raw(b'[' + b'0,' * 400000 + b'0]')\n",
    "call_flood": _CHANNEL + "for i in range(10000):\n    call(i, [f'flood-{i}'])\n",
    "idle_flood": _CHANNEL + "for i in range(2500):\n    send({'op': 'idle', 'seq': 0, 'notes': ['n' * 500] * 50, "
                             "'stats': {}})\n",
    "garbage": _CHANNEL + "send_raw(b'{oops' * 200000)\n",
    "huge_result": "x = many(10 ** 6)\n",
    "python_burn": "while True:\n    pass\n",
    "c_burn": "x = pow(3, 10 ** 9)\n",
    "memory_bomb": "x = bytearray(8 << 30)\n",
    "thread_bomb": ("import threading, time\nthreading.stack_size(1 << 16)\ntry:\n    for _ in range(10000):\n"
                    "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                    "except BaseException:\n    pass\n"),
    "disk_fill": ("try:\n    for i in range(1000):\n        open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n"
                  "except OSError:\n    pass\n"),
}


def _runtime() -> Runtime:
    def fetch(url: str) -> str:
        return url

    def many(n: int) -> list[int]:
        return list(range(n))

    return Runtime([tool(fetch, effect=Effect.PURE), tool(many, effect=Effect.PURE)],
                   Policy(max_calls_per_turn=512, max_cost_per_turn=1e9))


async def _probe(until: float, lags: list[float], cpu: list[float]) -> None:
    while time.monotonic() < until:
        start, start_cpu = time.monotonic(), time.thread_time()
        await asyncio.sleep(0.001)
        lags.append((time.monotonic() - start - 0.001) * 1000)
        cpu.append((time.thread_time() - start_cpu) * 1000)


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"max_ms": round(ordered[-1], 2), "p99_ms": round(p99, 2), "median_ms": round(statistics.median(ordered), 3),
            "n": len(ordered)}


async def measure(repeats: int, classes: Sequence[str]) -> dict[str, Any]:
    limits = ShadowLimits(statement_cpu_s=0.5, cpu_s=2.0, memory_bytes=512 << 20)
    predictor = CodePredictor(mode=CodeMode.WHOLE, limits=limits)
    runtime = _runtime()
    await asyncio.sleep(1.0)  # the pool's fork server starts
    load_before = os.getloadavg()
    lags: dict[str, list[float]] = {name: [] for name in classes}
    cpu: dict[str, list[float]] = {name: [] for name in classes}
    endings: dict[str, str] = {}
    for _ in range(repeats):
        for name in classes:
            session = runtime.session()
            turn = predictor.begin(session, {})
            await asyncio.sleep(0.05)
            probe = asyncio.create_task(_probe(time.monotonic() + WINDOW_S, lags[name], cpu[name]))
            turn.feed(HOSTILE[name])
            turn.finish()
            await probe
            endings[name] = turn.shadow.ended or ""
            await turn.close()
            session.end_turn()
            await session.close()
    predictor.pool.close()
    runtime.close()
    return {"classes": {name: _summary(v) | {"cpu_max_ms": round(max(cpu[name]), 2),
                                             "worker_ended": endings[name][:120]} for name, v in lags.items()},
            "max_ms": round(max(max(v) for v in lags.values()), 2),
            "cpu_max_ms": round(max(max(v) for v in cpu.values()), 2),
            "load_average_before": load_before, "load_average_after": os.getloadavg()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--class", dest="classes", action="append", choices=sorted(HOSTILE),
                        help="measure only these classes (repeatable)")
    parser.add_argument("--json", default=None, help="write machine-readable results here")
    args = parser.parse_args(argv)
    classes = args.classes or list(HOSTILE)
    results = asyncio.run(measure(args.repeats, classes))
    for name, row in results["classes"].items():
        print(f"{name:24s} max {row['max_ms']:8.2f} ms  p99 {row['p99_ms']:7.2f}  median {row['median_ms']:6.3f}  "
              f"loop cpu max {row['cpu_max_ms']:7.2f} ms  n {row['n']}  {row['worker_ended']}")
    print(f"overall max {results['max_ms']} ms (loop cpu {results['cpu_max_ms']} ms); load average before "
          f"{results['load_average_before']}, after {results['load_average_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "bench.code.looplag", "version": __version__,
                       "params": {"repeats": args.repeats, "classes": classes, "window_s": WINDOW_S},
                       "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
