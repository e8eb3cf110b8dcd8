"""A continuation inside vLLM's engine: one streaming-input request whose KV cache survives between turns.

vLLM 0.32's ``EngineClient.generate`` (``AsyncLLM``) accepts an async generator of ``StreamingInput`` in
place of a prompt. Each chunk is added as a ``resumable`` request under the same id: the scheduler appends
the chunk's tokens to the live request and keeps its computed tokens (``_update_request_as_session``), so
only the new chunk is prefilled. When a chunk's generation stops, the request parks
(``WAITING_FOR_STREAMING_REQ``) with its KV blocks until the next chunk arrives or the input generator
ends. The last token sampled in a chunk was never fed forward, so the scheduler drops it: a continuation
that keeps the conversation exact sends it again at the head of the next chunk (:func:`carry_last`).

:func:`run_session` drives such a request and decides at each stop what comes next (the decide-at-stop of
docs/engine-vllm.md section 7: the tool result's rendering when a cached result matches the closed call,
``None`` to end the request); :func:`run_fresh` is the comparison, a new request per turn over the whole
conversation, which re-prefills what the prefix cache does not hold. Both run inside vLLM's API-server process
(the endpoint plugin calls them); ``vllm`` is imported when they run, so this module imports without it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from forethought.errors import WorkloadError


@dataclass(frozen=True, slots=True)
class Chunk:
    """Prompt tokens to append and how many tokens to generate after them (EOS ignored, temperature 0)."""

    token_ids: tuple[int, ...]
    max_tokens: int

    def __post_init__(self) -> None:
        if not self.token_ids or self.max_tokens < 1:
            raise WorkloadError("a chunk needs at least one token and max_tokens >= 1")


@dataclass(frozen=True, slots=True)
class ChunkOutput:
    """What one turn generated, why it stopped, and the cached-token count vLLM reported for it."""

    token_ids: tuple[int, ...]
    finish_reason: str | None
    num_cached_tokens: int | None


Decide = Callable[[Sequence[ChunkOutput]], Chunk | None]
"""Given the turns so far, the next chunk to append, or ``None`` to end the request."""


def carry_last(outputs: Sequence[ChunkOutput], chunk: Chunk) -> Chunk:
    """``chunk`` with the previous turn's last sampled token in front (vLLM drops it at a chunk's stop)."""
    last = outputs[-1].token_ids[-1:] if outputs else ()
    return Chunk((*last, *chunk.token_ids), chunk.max_tokens)


@dataclass(frozen=True, slots=True)
class Kit:
    """How a chunk becomes vLLM's objects: its ``SamplingParams`` and a ``StreamingInput`` (a fake in tests)."""

    params: Callable[[Chunk], Any]
    streaming_input: Callable[[dict[str, Any], Any], Any]


def vllm_kit() -> Kit:
    """The real :class:`Kit` (imports ``vllm``: call it inside vLLM's process)."""
    from vllm import SamplingParams
    from vllm.engine.protocol import StreamingInput
    from vllm.sampling_params import RequestOutputKind

    def params(chunk: Chunk) -> Any:
        return SamplingParams(max_tokens=chunk.max_tokens, temperature=0.0, ignore_eos=True,
                              output_kind=RequestOutputKind.DELTA)

    return Kit(params, lambda prompt, sampling: StreamingInput(prompt=prompt, sampling_params=sampling))


def _prompt(token_ids: Sequence[int], cache_salt: str | None) -> dict[str, Any]:
    prompt: dict[str, Any] = {"prompt_token_ids": list(token_ids)}
    if cache_salt:
        prompt["cache_salt"] = cache_salt
    return prompt


async def _collect(stream: AsyncIterator[Any], on_stop: Callable[[ChunkOutput], None]) -> None:
    tokens: list[int] = []
    async for out in stream:
        completion = out.outputs[0]
        tokens.extend(completion.token_ids)
        if completion.finish_reason is not None:
            on_stop(ChunkOutput(tuple(tokens), completion.finish_reason, out.num_cached_tokens))
            tokens = []


async def run_session(engine: Any, first: Chunk, decide: Decide, *, cache_salt: str | None = None,
                      request_id: str | None = None, kit: Kit | None = None, pause_s: float = 0.0,
                      sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> list[ChunkOutput]:
    """One streaming-input request on ``engine`` (vLLM's ``EngineClient``): ``first``, then whatever
    ``decide`` returns at each stop, appended to the same request; the turns' outputs in order.

    ``pause_s`` holds each later chunk back that long (a tool's run time): the request stays parked in
    the engine meanwhile, with its KV blocks and its slot.
    """
    kit = kit or vllm_kit()
    pending: asyncio.Queue[Chunk | None] = asyncio.Queue()
    pending.put_nowait(first)
    outputs: list[ChunkOutput] = []

    async def inputs() -> AsyncIterator[Any]:
        while (chunk := await pending.get()) is not None:
            if outputs and pause_s > 0:
                await sleep(pause_s)
            yield kit.streaming_input(_prompt(chunk.token_ids, cache_salt), kit.params(chunk))

    def on_stop(output: ChunkOutput) -> None:
        outputs.append(output)
        pending.put_nowait(decide(outputs))

    await _collect(engine.generate(inputs(), kit.params(first), request_id or f"ft-session-{uuid.uuid4().hex}"),
                   on_stop)
    return outputs


async def run_fresh(engine: Any, chunks: Sequence[Chunk], *, cache_salt: str | None = None,
                    kit: Kit | None = None) -> list[ChunkOutput]:
    """The turns of ``run_session(engine, chunks[0], scripted(chunks))``, each a new request over the whole
    conversation so far (the same tokens: the previous turn's output is in the conversation already)."""
    kit = kit or vllm_kit()
    conversation: list[int] = []
    outputs: list[ChunkOutput] = []
    for chunk in chunks:
        conversation.extend(chunk.token_ids)
        await _collect(engine.generate(_prompt(conversation, cache_salt), kit.params(chunk),
                                       f"ft-fresh-{uuid.uuid4().hex}"), outputs.append)
        conversation.extend(outputs[-1].token_ids)
    return outputs


def scripted(chunks: Sequence[Chunk], carry: bool = True) -> Decide:
    """A :data:`Decide` that appends ``chunks[1:]`` in order (with :func:`carry_last` when ``carry``)."""
    def decide(outputs: Sequence[ChunkOutput]) -> Chunk | None:
        if len(outputs) >= len(chunks):
            return None
        nxt = chunks[len(outputs)]
        return carry_last(outputs, nxt) if carry else nxt
    return decide


__all__ = ["Chunk", "ChunkOutput", "Decide", "Kit", "carry_last", "run_fresh", "run_session", "scripted", "vllm_kit"]
