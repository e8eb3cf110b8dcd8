"""The documentation runs: every ```python block of README.md, CONTRIBUTING.md and docs/*.md, and every
script in examples/.

Every README block runs as a reader would run it: saved as a file and started with the project's
interpreter (``python block.py``, in an empty directory), so a top-level ``await`` is a failure there. Each
is followed by an ```output block holding exactly what it prints (``...`` matches anything, as in doctest).
The other pages' blocks are executed in a fresh namespace (as ``__main__``, in an empty working directory)
by one child interpreter, started with the examples, with a per-block time limit; a block that awaits at
top level runs under ``asyncio.run``. The examples run as scripts, each in its own child process. All of
them may import forethought only through its public surface (``forethought`` and
``forethought.integrations``). Blocks that are not meant to run are fenced as ``text``, ``sh`` and so on.

The docs also cite tests by ``tests/test_x.py::test_name`` and link files by relative path: each cited
test and each linked file must exist, so the design document cannot drift away from the suite.
"""

from __future__ import annotations

import ast
import doctest
import json
import os
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [p for p in (README, ROOT / "CONTRIBUTING.md") if p.exists()] + sorted((ROOT / "docs").glob("*.md"))
MARKDOWN = DOCS + [p for p in [ROOT / "CHANGELOG.md"] if p.exists()]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PYTHON_TAGS = {"python", "py", "python3"}
PUBLIC_MODULES = {"forethought", "forethought.integrations"}
SNIPPET_TIMEOUT_S = 120
"""A guard against a hanging block, not a speed assertion: generous, since a loaded machine is slow."""
EXAMPLE_TIMEOUT_S = 180


@dataclass(frozen=True)
class Block:
    """One fenced block of a markdown file."""

    path: pathlib.Path
    line: int
    """1-based line of the opening fence."""
    tag: str
    code: str
    end: int = 0
    """1-based line of the closing fence."""

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: pathlib.Path) -> list[Block]:
    """The fenced code blocks of ``path`` (backtick or tilde fences; a fence closes on one at least as long)."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    opening = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)")
    i = 0
    while i < len(lines):
        found = opening.match(lines[i])
        if found is None:
            i += 1
            continue
        indent, fence, tag = len(found.group(1)), found.group(2), found.group(3).lower()
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        blocks.append(Block(path, i + 1, tag, "\n".join(body) + "\n", j + 1))
        i = j + 1
    return blocks


def python_blocks() -> list[Block]:
    return [b for path in DOCS for b in fenced_blocks(path) if b.tag in PYTHON_TAGS]


def readme_blocks() -> list[tuple[Block, Block | None]]:
    """Each python block of the README with the ```output block right after it (blank lines between), if any."""
    blocks = fenced_blocks(README)
    lines = README.read_text(encoding="utf-8").splitlines()
    pairs = []
    for block, after in zip(blocks, [*blocks[1:], None], strict=True):
        if block.tag not in PYTHON_TAGS:
            continue
        adjacent = after is not None and after.tag == "output" and not "".join(lines[block.end:after.line - 1]).strip()
        pairs.append((block, after if adjacent else None))
    return pairs


def output_matches(expected: str, printed: str) -> bool:
    """Whether ``printed`` is ``expected``, where ``...`` in ``expected`` matches any text (doctest's ELLIPSIS)."""
    return doctest.OutputChecker().check_output(expected, printed, doctest.ELLIPSIS)


def private_imports(source: str, filename: str) -> list[str]:
    """Imports of forethought other than its public modules, and uses of ``forethought._private`` names."""
    tree = ast.parse(source, filename)
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] == "forethought"
                    and a.name not in PUBLIC_MODULES]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module.split(".")[0] == "forethought":
                if module not in PUBLIC_MODULES:
                    bad.append(module)
                bad += [f"{module}.{a.name}" for a in node.names if a.name.startswith("_")
                        and a.name != "__version__"]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "forethought" and node.attr.startswith("_") and node.attr != "__version__"):
            bad.append(f"forethought.{node.attr}")
    return bad


# --- the runner of doc blocks (one child interpreter for all of them) -------------------------------

RUNNER = r'''
import ast, asyncio, contextlib, inspect, io, json, os, signal, sys, tempfile, time, traceback

class Timeout(BaseException):
    pass

def alarm(signum, frame):
    raise Timeout(f"ran past {limit} s")

signal.signal(signal.SIGALRM, alarm)
limit, blocks = int(sys.argv[1]), json.loads(open(sys.argv[2], encoding="utf-8").read())
results = {}
real_stdout = sys.stdout
for block in blocks:
    out = io.StringIO()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        os.chdir(cwd)
        namespace = {"__name__": "__main__", "__file__": block["id"]}
        signal.alarm(limit)
        try:
            with contextlib.redirect_stdout(out):
                code = compile(block["code"], block["id"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                pending = eval(code, namespace)  # a coroutine when the block awaits at top level
                if inspect.iscoroutine(pending):
                    asyncio.run(pending)
            error = None
        except SystemExit as exc:
            error = None if exc.code in (0, None) else f"SystemExit({exc.code!r})"
        except BaseException:
            error = traceback.format_exc(limit=-8)
        finally:
            signal.alarm(0)
            os.chdir("/")
    results[block["id"]] = {"error": error, "stdout": out.getvalue(), "seconds": time.perf_counter() - began}
real_stdout.write("\n@@RESULTS@@" + json.dumps(results))
'''


def _finish(process: subprocess.Popen[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        err += f"\n(killed after {timeout} s)"
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """The block runner and every example, all started at once (they mostly wait), each in its own directory.

    One runner serves every block: a child interpreter costs about a second of CPU to import forethought,
    and the blocks are short.
    """
    cache = tmp_path_factory.mktemp("cache")  # what the blocks learn (adapters' patterns) stays out of ~/.cache
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(cache)}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env}
    cwd = tmp_path_factory.mktemp("blocks")
    (cwd / "blocks.json").write_text(json.dumps([{"id": b.id, "code": b.code} for b in BLOCKS]), encoding="utf-8")
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(SNIPPET_TIMEOUT_S), str(cwd / "blocks.json")],
                              cwd=cwd, **pipes)  # type: ignore[call-overload]
    examples = {path.name: subprocess.Popen([sys.executable, str(path)], cwd=tmp_path_factory.mktemp(path.stem),
                                            **pipes)  # type: ignore[call-overload]
                for path in EXAMPLES}
    for block, _ in README_BLOCKS:  # as a reader runs one: saved as a file, in a directory of its own
        where = tmp_path_factory.mktemp(f"readme_{block.line}")
        (where / f"readme_{block.line}.py").write_text(block.code, encoding="utf-8")
        examples[block.id] = subprocess.Popen([sys.executable, f"readme_{block.line}.py"], cwd=where,
                                              **pipes)  # type: ignore[call-overload]
    done = {"@blocks": _finish(runner, SNIPPET_TIMEOUT_S * len(BLOCKS) + 30)}
    done.update({name: _finish(process, EXAMPLE_TIMEOUT_S) for name, process in examples.items()})
    return done


@pytest.fixture(scope="module")
def doc_runs(children: dict[str, subprocess.CompletedProcess[str]]) -> dict[str, dict[str, Any]]:
    done = children["@blocks"]
    assert "@@RESULTS@@" in done.stdout, f"the block runner died (rc {done.returncode}):\n{done.stderr[-3000:]}"
    results: dict[str, dict[str, Any]] = json.loads(done.stdout.rsplit("@@RESULTS@@", 1)[1])
    return results


README_BLOCKS = readme_blocks()
BLOCKS = [b for b in python_blocks() if b.path != README]
"""The blocks of the other pages (the README's run as files)."""


def test_the_readme_has_python_blocks_each_followed_by_its_output() -> None:
    assert README_BLOCKS, "the README's usage examples are not python blocks"
    missing = [block.id for block, output in README_BLOCKS if output is None]
    assert not missing, f"README python blocks without an ```output block right after them: {missing}"


@pytest.mark.parametrize(("block", "output"), README_BLOCKS, ids=[b.id for b, _ in README_BLOCKS])
def test_a_readme_block_runs_as_a_file_and_prints_its_output(
        block: Block, output: Block | None, children: dict[str, subprocess.CompletedProcess[str]]) -> None:
    done = children[block.id]
    assert done.returncode == 0, (
        f"{block.id}, saved as a file and run, exited {done.returncode}:\n{done.stderr[-3000:]}")
    assert output is not None, f"{block.id} has no ```output block after it"
    assert output_matches(output.code, done.stdout), (
        f"{block.id} printed:\n{done.stdout}\nbut its ```output block (line {output.line}) says:\n{output.code}")


@pytest.mark.parametrize(("expected", "printed", "matches"), [
    ("hit after 0.0 s\n", "hit after 0.0 s\n", True),
    ("24 C.\nOslo: 24 C\n", "24 C.Oslo: 24 C\n", False),  # two outputs run together
    ("took ... s\n", "took 0.52 s\n", True),
    ("['Oslo: 24 C']\n", "[]\n", False),
])
def test_output_blocks_match_exactly_but_for_ellipses(expected: str, printed: str, matches: bool) -> None:
    assert output_matches(expected, printed) is matches


def test_the_readme_blocks_are_plain_python_files() -> None:
    """A top-level ``await`` or ``async with`` is a SyntaxError in a file (it was in five of six blocks)."""
    for block, _ in README_BLOCKS:
        compile(block.code, block.id, "exec")  # no PyCF_ALLOW_TOP_LEVEL_AWAIT: as `python file.py` compiles it


@pytest.mark.parametrize("block", [b for b, _ in README_BLOCKS], ids=[b.id for b, _ in README_BLOCKS])
def test_a_readme_block_imports_only_public_names(block: Block) -> None:
    bad = private_imports(block.code, block.id)
    assert not bad, f"{block.id} imports private forethought names: {bad} (use forethought's public surface)"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_a_python_block_imports_only_public_names(block: Block) -> None:
    bad = private_imports(block.code, block.id)
    assert not bad, f"{block.id} imports private forethought names: {bad} (use forethought's public surface)"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_a_python_block_runs(block: Block, doc_runs: dict[str, dict[str, Any]]) -> None:
    result = doc_runs[block.id]
    assert result["error"] is None, (
        f"{block.id} failed (fence it as ```text if it is not meant to run):\n{result['error']}")


# --- examples/ -----------------------------------------------------------------------------------------


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2, "examples/ should hold runnable examples"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_imports_only_public_names(path: pathlib.Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert ast.get_docstring(ast.parse(source)), f"{path.name} needs a docstring saying what it shows"
    bad = private_imports(source, str(path))
    assert not bad, f"{path.name} imports private forethought names: {bad}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_runs_and_says_something(
        path: pathlib.Path, children: dict[str, subprocess.CompletedProcess[str]]) -> None:
    done = children[path.name]
    assert done.returncode == 0, f"{path.name} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert len(done.stdout.strip().splitlines()) >= 2, f"{path.name} printed too little: {done.stdout!r}"


# --- what the docs cite and link --------------------------------------------------------------------------

CITED_TEST = re.compile(r"(tests/test_\w+\.py)::(\w+)")
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")


def test_every_test_the_docs_cite_exists() -> None:
    cited = [(doc, m.group(1), m.group(2)) for doc in MARKDOWN
             for m in CITED_TEST.finditer(doc.read_text(encoding="utf-8"))]
    assert len(cited) >= 30, "docs/design.md names the tests behind each invariant"
    missing = []
    for doc, file, name in cited:
        target = ROOT / file
        defined = target.exists() and re.search(rf"^\s*(async\s+)?def {name}\(|^class {name}\b|^{name} = ",
                                                target.read_text(encoding="utf-8"), re.M)
        if not defined:
            missing.append(f"{doc.relative_to(ROOT)} cites {file}::{name}")
    assert not missing, "cited tests that do not exist:\n" + "\n".join(missing)


def _anchors(path: pathlib.Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file (lower case, punctuation dropped, spaces to -)."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_of_the_docs_exists() -> None:
    broken = []
    for doc in MARKDOWN:
        for m in LINK.finditer(doc.read_text(encoding="utf-8")):
            target, anchor = m.group(1), m.group(2)
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path = doc.parent / target if target else doc
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{doc.relative_to(ROOT)} -> {target}#{anchor} (no such heading)")
    assert not broken, "broken relative links:\n" + "\n".join(broken)


def test_the_docs_never_defer_to_a_design_file_outside_the_repo() -> None:
    """The design lives in docs/design.md; no page points readers at a DESIGN.md the repository lacks."""
    deferring = [str(doc.relative_to(ROOT)) for doc in MARKDOWN if "DESIGN.md" in doc.read_text(encoding="utf-8")]
    assert not deferring, f"pages citing DESIGN.md instead of docs/design.md: {deferring}"
