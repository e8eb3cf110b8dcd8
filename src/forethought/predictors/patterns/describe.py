"""What each offered tool says it does: its description's words, matched against a turn's first message.

Every tool set comes with descriptions (OpenAI ``tools`` entries, MCP ``tools/list``); they say what a tool
does in words a user might use ("Display the contents of a file", "Estimate the disk usage of a
directory"), which the learned word-tool associations of :mod:`flow` know only for tools seen often
enough. :func:`description_words` reads the content words of each tool's description and name;
:func:`description_match` scores how well a message's words pick out each candidate tool: of the
message's words found in the descriptions, the share that tool's description holds, each word weighed by
how few of the offered tools mention it (``log(n / tools with the word)``: a word every tool's
description has, such as a tool family's shared preamble, weighs nothing).

Only the tool's own description is read, not its parameters' (parameter names and descriptions matched
the same way lowered the figures: docs/patterns.md, fourth round). Nothing here knows a tool or a domain.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence, Set
from typing import Any

from forethought.predictors.patterns.text import content_words, name_words

DESCRIBED_TOOL_SETS = 64
"""Tool sets whose description words are remembered (by their names and descriptions)."""


def description_words(openai_tools: Sequence[Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """Tool name -> the content words of its description and its name words, for each OpenAI ``tools``
    entry (or bare function entry) with a name; tools without a description get their name words. The
    same descriptions (sessions offering one tool set) are read once."""
    texts: list[tuple[str, str]] = []
    for entry in openai_tools:
        function = entry.get("function", entry) if isinstance(entry, Mapping) else None
        if isinstance(function, Mapping) and "name" in function:
            description = function.get("description")
            texts.append((str(function["name"]), description if isinstance(description, str) else ""))
    return dict(_words_of(tuple(texts)))


@functools.lru_cache(maxsize=DESCRIBED_TOOL_SETS)
def _words_of(texts: tuple[tuple[str, str], ...]) -> tuple[tuple[str, frozenset[str]], ...]:
    joined: dict[str, list[str]] = {}
    for name, description in texts:
        joined.setdefault(name, []).append(description)
    return tuple((name, frozenset(content_words(" ".join(parts))) | frozenset(name_words(name)))
                 for name, parts in joined.items())


def description_match(words: Set[str], descriptions: Mapping[str, frozenset[str]],
                      candidates: Sequence[str]) -> dict[str, float]:
    """Per candidate tool, in [0, 1]: of the message's words found in any candidate's description, the
    idf-weighted share this tool's description holds (1: it holds them all; a word in every candidate's
    description weighs nothing). Empty when no word tells the candidates apart."""
    if not words or not descriptions:
        return {}
    matched = [descriptions.get(tool, frozenset()) & words for tool in candidates]
    spread: dict[str, int] = {}
    for found in matched:
        for word in found:
            spread[word] = spread.get(word, 0) + 1
    if not spread:
        return {}
    n = len(candidates)
    weights = {word: math.log(n / count) for word, count in spread.items()}
    total = sum(weights.values())
    if total <= 0:
        return {}
    return {tool: sum(weights[w] for w in found) / total for tool, found in zip(candidates, matched, strict=True)}
