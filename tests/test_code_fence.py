"""Code extraction and statement segmentation from streamed text: fences, unfenced code, frontier cost."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.code import segment as code_segment
from forethought.code.fence import (
    BlockClosed,
    BlockLine,
    BlockOpened,
    CodeMode,
    FenceExtractor,
    looks_like_code,
)
from forethought.code.lexer import LineLexer
from forethought.code.segment import StatementSegmenter

MESSAGE = """Let me check a few things.
```python
urls = ["a", "b"]
out = []
for u in urls:
    r = fetch(u)

    out.append(r)
@decorate
def f(x):
    return x
if out:
    pass
else:
    y = (1,
         2)
```
Some output:
```json
{"not": "code"}
```
```repl
z = fetch("c")
```
"""


def _segment(message: str, cuts: list[int], mode: CodeMode = CodeMode.AUTO) -> tuple[list[str], list[str], list[str]]:
    extractor = FenceExtractor(mode)
    segmenters: dict[int, StatementSegmenter] = {}
    statements: list[str] = []

    def handle(events: list[BlockOpened | BlockLine | BlockClosed]) -> None:
        for event in events:
            if isinstance(event, BlockOpened):
                segmenters[event.block] = StatementSegmenter(event.block)
            elif isinstance(event, BlockLine):
                statements.extend(s.source for s in segmenters[event.block].push_line(event.line))
            else:
                statements.extend(s.source for s in segmenters[event.block].finish())

    last = 0
    for cut in [*sorted(set(cuts)), len(message)]:
        handle(extractor.feed(message[last:cut]))
        last = cut
    handle(extractor.finish())
    return statements, [b.code for b in extractor.blocks], extractor.notes


def test_statements_of_fenced_blocks() -> None:
    statements, blocks, _ = _segment(MESSAGE, [])
    assert statements == [
        'urls = ["a", "b"]', "out = []", "for u in urls:\n    r = fetch(u)\n\n    out.append(r)",
        "@decorate\ndef f(x):\n    return x", "if out:\n    pass\nelse:\n    y = (1,\n         2)", 'z = fetch("c")']
    assert len(blocks) == 2 and "not" not in "".join(blocks)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(MESSAGE)), max_size=40))
def test_any_chunking_gives_the_same_statements(cuts: list[int]) -> None:
    assert _segment(MESSAGE, cuts) == _segment(MESSAGE, [])


def test_simple_statement_is_emitted_at_its_own_newline() -> None:
    segmenter = StatementSegmenter(0)
    assert segmenter.push_line("x = fetch(") == []
    assert segmenter.push_line("    'a')") != []
    assert [s.source for s in segmenter.push_line("for i in y:")] == []
    assert segmenter.push_line("    z = 1") == []
    assert [s.source for s in segmenter.push_line("w = 2")] == ["for i in y:\n    z = 1", "w = 2"]


def test_each_statement_is_parsed_once_whatever_the_program_length(monkeypatch: object) -> None:
    calls = []
    real_parse = ast.parse

    def counting_parse(source: str, *args: object, **kwargs: object) -> ast.Module:
        calls.append(len(source))
        return real_parse(source)

    monkeypatch.setattr(code_segment.ast, "parse", counting_parse)  # type: ignore[attr-defined]
    segmenter = StatementSegmenter(0)
    for i in range(500):
        segmenter.push_line(f"x{i} = fetch('{i}')")
    assert len(calls) == 500
    assert max(calls) < 30  # only the closed statement is parsed, never the program so far


def test_syntax_error_stops_the_block_and_says_why() -> None:
    segmenter = StatementSegmenter(0)
    assert segmenter.push_line("x = 1") != []
    assert segmenter.push_line("y = = 2") == []
    assert segmenter.broken is not None and "line 2" in segmenter.broken
    assert segmenter.push_line("z = 3") == []


def test_lexer_tracks_strings_and_brackets_across_lines() -> None:
    lexer = LineLexer()
    lexer.push('x = """start ( [')
    assert lexer.open and lexer.string == '"""'
    lexer.push('end""" + f("a)", [1,')
    assert lexer.brackets == "([" and lexer.closers() == "])"
    lexer.push("2]) # ( comment")
    assert not lexer.open


def test_unfenced_code_is_detected_in_auto_mode() -> None:
    message = "I will fetch it now.\nresult = fetch('a')\nprint(result)\n"
    statements, _blocks, notes = _segment(message, [5, 30])
    assert statements == ["result = fetch('a')", "print(result)"]
    assert any("unfenced code" in n for n in notes)


def test_unfenced_code_in_fenced_mode_is_reported_not_silent() -> None:
    message = "result = fetch('a')\nprint(result)\n"
    statements, blocks, notes = _segment(message, [], CodeMode.FENCED)
    assert statements == [] and blocks == []
    assert any("look like Python code" in n and "nothing was speculated" in n for n in notes)


def test_whole_mode_treats_everything_as_code() -> None:
    statements, _blocks, _ = _segment("a = 1\nb = fetch(a)", [3], CodeMode.WHOLE)
    assert statements == ["a = 1", "b = fetch(a)"]


def test_prose_is_not_code() -> None:
    for line in ("Sure.", "Here is the plan:", "Note: important", "Hello", "I will call fetch(u) for each u.",
                 "Result: 5", "(see below"):
        assert not looks_like_code(line), line
    for line in ("x = 1", "print(x)", "for u in urls:", "results = fetch(", "import json", "def f(x):"):
        assert looks_like_code(line), line
