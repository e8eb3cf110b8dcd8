"""The in-engine continuation measured on a real vLLM: one streaming-input session against a fresh request per turn.

``python -m forethought.bench.vllm.session_probe`` starts vLLM (CPU build, tiny random model, the endpoint plugin with
its session route, ``--enable-mfu-metrics``), renders a BFCL conversation with the model's chat template
(``/tokenize``: the system text, every tool, the first user message), and runs the same turns two ways
through ``POST /forethought/engine/session`` (:mod:`forethought.engines.vllm.session`):

* ``session`` — one request; after each turn the tool result's rendering is appended to the live request,
  whose KV cache stays (only the appended tokens are prefilled);
* ``fresh`` — a new request per turn over the whole conversation, as the gateway and the plugin relay do;
  vLLM's prefix cache serves whole blocks of it (128 tokens on CPU), the rest is prefilled again.

Arms interleave per repeat, each repeat under its own cache salts. Per arm: the tokens out (checked equal
across arms), vLLM's counters around the arm (prompt tokens, computed, cached, prefix-cache queries/hits,
requests) and vLLM's FLOP estimate of the scheduled steps — the one counter that covers a session's
appended chunks (the prompt counters record one prefill per request). The CPU caveat of docs/engine-vllm.md
applies to every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2

from forethought.bench.vllm import metrics
from forethought.bench.vllm.bench import CPU_CAVEAT
from forethought.bench.vllm.server import MODEL_NAME, VllmConfig, VllmServer
from forethought.bench.workloads.bfcl_workload import BfclWorkload
from forethought.engines.vllm.plugin import PLUGIN_NAME, SESSION_PROBE_ENV, SESSION_ROUTE
from forethought.errors import ForethoughtError

MODES = ("session", "fresh")
TOOL_OUTPUT = '{"result": "' + "x" * 160 + '"}'


def tool_suffix(output: str) -> str:
    """The tiny model's chat-template rendering after an assistant call: end of turn, the tool message, the
    assistant's generation prompt."""
    return (f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n")


async def _tokenize(http: httpx2.AsyncClient, url: str, **body: Any) -> list[int]:
    answer = await http.post(url + "/tokenize", json={"model": MODEL_NAME, **body})
    answer.raise_for_status()
    return list(answer.json()["tokens"])


async def _arm(http: httpx2.AsyncClient, url: str, mode: str, chunks: list[dict[str, Any]]) -> dict[str, Any]:
    before = await metrics.read(url, http)
    started = time.monotonic()
    answer = await http.post(url + SESSION_ROUTE, json={"mode": mode, "chunks": chunks,
                                                        "cache_salt": uuid.uuid4().hex})
    wall = time.monotonic() - started
    answer.raise_for_status()
    turns = [c["token_ids"] for c in answer.json()["chunks"]]
    expected = sum(c["max_tokens"] for c in chunks)
    for _ in range(40):  # the counters land a little after the last token
        used = await metrics.read(url, http) - before
        if used.generation_tokens >= expected:
            break
        await asyncio.sleep(0.25)
    appended = sum(len(c["token_ids"]) for c in chunks[1:])
    scheduled = (len(chunks[0]["token_ids"]) + appended + len(chunks) - 1 if mode == "session"
                 else used.prompt_tokens_computed)
    return {"wall_s": wall, "turns": turns, "prefill_scheduled": scheduled, "vllm": used.as_dict()}


async def run(turns: int = 4, call_tokens: int = 40, repeats: int = 3, trajectory: int = 0) -> dict[str, Any]:
    """Start vLLM, run the arms, stop it; the JSON document."""
    if min(turns, call_tokens, repeats) < 1:
        raise ForethoughtError("turns, call tokens and repeats must be >= 1")
    conversation = BfclWorkload(count=trajectory + 1).trajectories()[trajectory]
    load_before = os.getloadavg()
    config = VllmConfig(plugins=(PLUGIN_NAME,), extra_args=("--enable-mfu-metrics",),
                        extra_env={SESSION_PROBE_ENV: "1"})
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with VllmServer(config) as server:
        async with httpx2.AsyncClient(timeout=600.0) as http:
            messages = [{"role": "system", "content": conversation.system or "You are a helpful assistant."},
                        {"role": "user", "content": conversation.turns[0].user}]
            first = await _tokenize(http, server.url, messages=messages, tools=list(conversation.tools),
                                    add_generation_prompt=True)
            suffix = await _tokenize(http, server.url, prompt=tool_suffix(TOOL_OUTPUT), add_special_tokens=False)
            chunks = [{"token_ids": first, "max_tokens": call_tokens}] + [
                {"token_ids": suffix, "max_tokens": call_tokens}] * (turns - 1)
            for repeat in range(repeats):
                for mode in MODES if repeat % 2 == 0 else MODES[::-1]:
                    runs[mode].append(await _arm(http, server.url, mode, chunks))
        ready_s = server.ready_s
    identical = all(s["turns"] == f["turns"] for s, f in zip(runs["session"], runs["fresh"], strict=True))
    summary = {mode: {"wall_s": _spread([r["wall_s"] for r in rows]),
                      "prefill_scheduled": _spread([r["prefill_scheduled"] for r in rows]),
                      "vllm": {k: _spread([r["vllm"][k] for r in rows]) for k in rows[0]["vllm"]}}
               for mode, rows in runs.items()}
    return {"caveat": CPU_CAVEAT, "trajectory": conversation.id, "first_chunk_tokens": len(first),
            "suffix_tokens": len(suffix), "turns": turns, "call_tokens": call_tokens, "repeats": repeats,
            "identical_outputs": identical, "summary": summary,
            "runs": {m: [{k: v for k, v in r.items() if k != "turns"} for r in rows] for m, rows in runs.items()},
            "vllm_ready_s": ready_s, "load_average": {"before": list(load_before), "after": list(os.getloadavg())}}


async def _gauges(http: httpx2.AsyncClient, url: str) -> dict[str, float]:
    answer = await http.get(url + "/metrics")
    answer.raise_for_status()
    wanted = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    out: dict[str, float] = dict.fromkeys(wanted, 0.0)
    for line in answer.text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


async def parked(pause_s: float = 6.0, call_tokens: int = 40, repeats: int = 3) -> dict[str, Any]:
    """What a parked session holds: with ``--max-num-seqs 1``, a short fresh request alone, and the same
    request sent while a session waits ``pause_s`` between its turns (its latency shows whether the parked
    session keeps the engine's only slot); vLLM's running/waiting gauges and KV usage during the pause."""
    load_before = os.getloadavg()
    config = VllmConfig(plugins=(PLUGIN_NAME,), max_num_seqs=1, enforce_eager=True,
                        extra_env={SESSION_PROBE_ENV: "1"})
    rows: list[dict[str, Any]] = []
    with VllmServer(config) as server:
        async with httpx2.AsyncClient(timeout=600.0) as http:
            prompt = await _tokenize(http, server.url, messages=[{"role": "user", "content": "Buy 100 NVDA"}],
                                     add_generation_prompt=True)
            suffix = await _tokenize(http, server.url, prompt=tool_suffix("ok"), add_special_tokens=False)
            probe = {"mode": "fresh", "chunks": [{"token_ids": prompt, "max_tokens": 4}]}
            session = {"mode": "session", "pause_s": pause_s, "chunks": [
                {"token_ids": prompt, "max_tokens": call_tokens}, {"token_ids": suffix, "max_tokens": 4}]}

            async def timed(body: dict[str, Any]) -> float:
                started = time.monotonic()
                (await http.post(server.url + SESSION_ROUTE, json={**body, "cache_salt": uuid.uuid4().hex}))\
                    .raise_for_status()
                return time.monotonic() - started

            for _ in range(repeats):
                alone = await timed(probe)
                parked_task = asyncio.create_task(timed(session))
                gauges: dict[str, float] = {}
                for _ in range(200):  # until the first turn is done and the session parks
                    await asyncio.sleep(0.05)
                    gauges = await _gauges(http, server.url)
                    if gauges["vllm:num_requests_running"] == 0 and gauges["vllm:kv_cache_usage_perc"] > 0:
                        break
                beside = await timed(probe)
                rows.append({"alone_s": alone, "beside_parked_s": beside, "session_s": await parked_task,
                             "gauges_while_parked": gauges})
        ready_s = server.ready_s
    return {"caveat": CPU_CAVEAT, "pause_s": pause_s, "max_num_seqs": 1, "rows": rows,
            "alone_s": _spread([r["alone_s"] for r in rows]),
            "beside_parked_s": _spread([r["beside_parked_s"] for r in rows]),
            "vllm_ready_s": ready_s, "load_average": {"before": list(load_before), "after": list(os.getloadavg())}}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--call-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--parked", action="store_true", help="measure what a parked session holds instead")
    args = parser.parse_args()
    if args.parked:
        found = asyncio.run(parked(repeats=args.repeats))
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(found, indent=1))
        print(json.dumps(found, indent=1))
        return
    doc = asyncio.run(run(args.turns, args.call_tokens, args.repeats))
    text = json.dumps(doc, indent=1)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(json.dumps({k: doc[k] for k in ("first_chunk_tokens", "suffix_tokens", "identical_outputs", "summary",
                                          "load_average")}, indent=1))
    if not doc["identical_outputs"]:
        raise SystemExit("the session's tokens differ from the fresh requests'")


if __name__ == "__main__":
    main()
