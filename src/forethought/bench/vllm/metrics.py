"""vLLM's own counters, read from its Prometheus ``/metrics``: what the engine computed, not an estimate.

:func:`parse` turns the exposition text into an :class:`EngineCounters` value (summed over engines and
models); subtracting two snapshots gives what happened between them, so one server can serve several arms
of a benchmark one after another. ``prompt_tokens_computed`` is vLLM's ``local_compute`` source of prompt
tokens: the prefill the engine really ran, after its prefix cache — for a request's first prefill: vLLM
records prefill statistics once per request, so the chunks a streaming-input session appends later
(:mod:`.session`) are in none of the prompt counters; ``estimated_flops`` (vLLM's per-step estimate from
the tokens it scheduled) covers them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import httpx2
from prometheus_client.parser import text_string_to_metric_families

_SAMPLES = {
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:prompt_tokens_cached_total": "prompt_tokens_cached",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:estimated_flops_per_gpu_total": "estimated_flops",
}


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """Cumulative token and request counters of one vLLM server (or a difference of two snapshots)."""

    prompt_tokens: float = 0.0
    prompt_tokens_computed: float = 0.0
    prompt_tokens_cached: float = 0.0
    generation_tokens: float = 0.0
    prefix_cache_queries: float = 0.0
    prefix_cache_hits: float = 0.0
    preemptions: float = 0.0
    requests: float = 0.0
    estimated_flops: float = 0.0
    """vLLM's estimate of the FLOPs of every scheduled step (``--enable-mfu-metrics``; else 0): unlike the prompt
    counters, which count a request's first prefill only, it covers the chunks a streaming-input session appends."""

    def __sub__(self, other: EngineCounters) -> EngineCounters:
        return EngineCounters(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, int]:
        return {f.name: round(getattr(self, f.name)) for f in fields(self)}


def parse(text: str) -> EngineCounters:
    """The counters in a ``/metrics`` body (absent ones are 0)."""
    values = dict.fromkeys((f.name for f in fields(EngineCounters)), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = _SAMPLES.get(sample.name)
            if name is not None:
                values[name] += sample.value
            elif sample.name == "vllm:prompt_tokens_by_source_total" and sample.labels.get("source") == "local_compute":
                values["prompt_tokens_computed"] += sample.value
            elif sample.name == "vllm:request_success_total":
                values["requests"] += sample.value
    return EngineCounters(**values)


async def read(base_url: str, http: httpx2.AsyncClient | None = None) -> EngineCounters:
    """Fetch and parse ``{base_url}/metrics`` (``base_url`` without ``/v1``)."""
    if http is not None:
        response = await http.get(base_url.rstrip("/") + "/metrics")
    else:
        async with httpx2.AsyncClient(timeout=30.0) as client:
            response = await client.get(base_url.rstrip("/") + "/metrics")
    response.raise_for_status()
    return parse(response.text)


__all__ = ["EngineCounters", "parse", "read"]
