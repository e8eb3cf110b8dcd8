"""The deterministic tiny model: a byte-level BPE tokenizer and a random-weight Llama, built from a seed.

``python tiny_model.py OUT_DIR [--seed N]``, run with the vLLM venv's interpreter (it needs ``torch``,
``transformers`` and ``tokenizers``, and imports nothing from forethought), writes a Hugging Face model
directory that vLLM serves: the tokenizer trained on :data:`CORPUS` (the text kept beside this file) with
the chat markup as special tokens and a Hermes-style chat template, a 2-layer Llama with weights drawn
from ``torch.manual_seed(seed)``, its generation config, and ``forethought.json`` (the build key and the
ids of the whitespace-only tokens, which the replay adapter suppresses). The same seed, text and source
give the same files; a directory whose ``forethought.json`` holds the current build key is left as it is.

The chat template renders ``prompt_tools`` (a chat-template argument) in place of ``tools`` when given: the
replay adapter offers the model one pinned tool for the grammar while the prompt keeps every real tool, so
consecutive requests of a conversation share their prefix. An assistant's calls are rendered right after its
header (``<|im_start|>assistant\n<tool_call>\n{...}\n</tool_call><|im_end|>``), so the canonical tokens of a call
that forced pinning makes the model emit (:mod:`forethought.bench.vllm.forced`) are the tokens a new request
renders for it, and a continuation inside the engine holds exactly the conversation a new request would.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).with_name("corpus.txt")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "</tool_response>")
VOCAB_SIZE = 1024
DEFAULT_SEED = 1234
MAX_POSITIONS = 32768
META_FILE = "forethought.json"
LAYERS, HIDDEN, HEADS, INTERMEDIATE = 2, 256, 4, 512

CHAT_TEMPLATE = """\
{%- set tool_list = prompt_tools if prompt_tools is defined and prompt_tools else tools -%}
{%- set system = messages[0].content if messages and messages[0].role == 'system' else none -%}
{%- if tool_list -%}
<|im_start|>system
{% if system %}{{ system }}
{% endif %}# Tools
<tools>
{%- for tool in tool_list %}
{{ tool | tojson }}
{%- endfor %}
</tools>
For each call, return a JSON object with the function name and its arguments within <tool_call></tool_call> tags.\
<|im_end|>
{% elif system -%}
<|im_start|>system
{{ system }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == 'user' -%}
<|im_start|>user
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' -%}
<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
{%- set arguments = call.function.arguments -%}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ arguments if arguments is string else arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""


def build_key(seed: int, corpus: str) -> str:
    """What the output depends on: the seed, the text and this file's source."""
    source = Path(__file__).read_bytes()
    return hashlib.sha256(b"\0".join([str(seed).encode(), corpus.encode(), source])).hexdigest()[:16]


def _tokenizer(corpus: str) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus.splitlines(keepends=True), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, model_max_length=MAX_POSITIONS,
                                   additional_special_tokens=list(SPECIAL_TOKENS[1:2] + SPECIAL_TOKENS[3:]))
    fast.chat_template = CHAT_TEMPLATE
    return fast


def whitespace_ids(tokenizer: Any) -> list[int]:
    """Ids of the ordinary tokens whose text is only whitespace (a random model loops on them at T=0)."""
    special = set(tokenizer.all_special_ids)
    out = []
    for token_id in range(len(tokenizer)):
        text = tokenizer.decode([token_id])
        if token_id not in special and text and not text.strip():
            out.append(token_id)
    return out


def build(out: Path, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Write the model directory (or keep it when it is current); return its ``forethought.json``."""
    corpus = CORPUS.read_text(encoding="utf-8")
    key = build_key(seed, corpus)
    meta_path = out / META_FILE
    if meta_path.exists():
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if meta.get("build_key") == key:
            return meta
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(corpus)
    tokenizer.save_pretrained(out)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                         max_position_embeddings=MAX_POSITIONS, bos_token_id=pad, eos_token_id=eos,
                         pad_token_id=pad, tie_word_embeddings=True, torch_dtype="bfloat16")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad).save_pretrained(out)
    meta = {"build_key": key, "seed": seed, "vocab_size": len(tokenizer), "eos_token_id": eos,
            "whitespace_token_ids": whitespace_ids(tokenizer),
            "parameters": sum(p.numel() for p in model.parameters())}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    meta = build(args.out, args.seed)
    print(json.dumps({k: v for k, v in meta.items() if k != "whitespace_token_ids"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
