"""Forced decoding inside vLLM: a logits processor that makes a request emit a given token sequence.

The replay pins a random model to a recorded call. With a grammar (:mod:`.pin`) the model writes the call's
text in whatever tokens it samples, and the grammar is fixed for a request's lifetime (vLLM 0.32 builds a
request's ``structured_output_request`` once, in ``Request.__init__``; a streaming-input chunk replaces the
sampling parameters but not the grammar), so a continuation inside the engine cannot be pinned that way.
:class:`ForcedTokens` pins by tokens instead, per chunk: a request whose sampling parameters carry
``extra_args["forethought_forced"]`` (``vllm_xargs`` in a chat request) can emit only the listed token at
each position of its output, until the list is spent. The model still runs a forward pass per token and
samples; it only has one token to choose. vLLM re-adds a streaming session's request to its batch with the
new chunk's parameters (``GPUModelRunner._update_streaming_request``), so every chunk is pinned by its own list.

Forced tokens are the canonical tokenization of the text the chat template renders for the call, so the
conversation the engine holds is token for token the one a fresh request would render (:func:`call_text`).

Loaded by vLLM with ``--logits-processors forethought.bench.vllm.forced:ForcedTokens`` in vLLM's engine
process; ``torch`` and ``vllm`` are imported only by :func:`processor_class`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

FORCED_ARG = "forethought_forced"
QUALNAME = "forethought.bench.vllm.forced:ForcedTokens"


def call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """The assistant text of one call as the tiny model's chat template renders it (and the hermes parser
    reads it): ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``, arguments as ``json.dumps``."""
    payload = json.dumps(dict(arguments), ensure_ascii=False)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {payload}}}\n</tool_call>'


def forced_ids(params: Any) -> tuple[int, ...] | None:
    """The forced sequence of a request's ``SamplingParams`` (``None`` when it has none)."""
    extra = getattr(params, "extra_args", None)
    raw = extra.get(FORCED_ARG) if isinstance(extra, Mapping) else None
    if not isinstance(raw, Sequence) or not raw:
        return None
    return tuple(int(t) for t in raw)


def next_forced(forced: Sequence[int], output: Sequence[int]) -> int | None:
    """The token due after ``output`` (``None`` once the sequence is spent)."""
    return forced[len(output)] if len(output) < len(forced) else None


@functools.cache
def processor_class() -> type[Any]:
    """The vLLM ``LogitsProcessor`` subclass (imports ``torch`` and ``vllm``: call it inside vLLM)."""
    import torch
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates
    from vllm.v1.sample.logits_processor.interface import LogitsProcessor

    class _ForcedTokens(LogitsProcessor):  # type: ignore[misc]
        """Row i may emit only ``forced[len(output_i)]`` while its forced sequence lasts."""

        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
            self.rows: dict[int, tuple[tuple[int, ...], Sequence[int]]] = {}

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update: Any) -> None:
            process_dict_updates(self.rows, batch_update,
                                 lambda params, _prompt, output: (ids, output)
                                 if (ids := forced_ids(params)) is not None else None)

        def apply(self, logits: Any) -> Any:
            for row, (forced, output) in self.rows.items():
                token = next_forced(forced, output)
                if token is None or row >= logits.shape[0] or token >= logits.shape[1]:
                    continue
                keep = logits[row, token].clone()
                logits[row].fill_(float("-inf"))
                logits[row, token] = torch.where(torch.isfinite(keep), keep, torch.zeros_like(keep))
            return logits

    return _ForcedTokens


def __getattr__(name: str) -> Any:
    if name == "ForcedTokens":  # resolved lazily, so this module imports without vLLM
        return processor_class()
    raise AttributeError(name)


__all__ = ["FORCED_ARG", "QUALNAME", "call_text", "forced_ids", "next_forced", "processor_class"]
