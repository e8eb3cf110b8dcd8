"""The code benchmark's programs: assistant messages whose code calls tools, in the shapes models write.

Each :class:`CodeProgram` is a whole assistant message (a sentence of prose and a fenced code block, as a
code-mode agent streams it). ``depth`` is the program's longest chain of tool calls that depend on each
other (a structural property of the code, used for the ideal wall time); ``kind`` groups programs in
reports (``map`` programs carry the >= 2x speedup target). The blocks use the ``repl`` fence because it is
the one fence the comparison arm (spec-ptc) reads; forethought reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CodeProgram:
    """One streamed assistant message with code.

    ``streamed_last``, ``chain_after`` and ``real_run_only`` describe what causality and the invariants of
    docs/design.md force beyond the ideal (structural properties of the code, like ``depth``; used for the
    bound no arm can beat, :func:`~forethought.bench.code.metrics.bound_wall`).
    """

    name: str
    kind: str
    depth: int
    message: str
    streamed_last: str = ""
    """Text (first occurrence) that the program's last chain of calls needs: its first call cannot be known
    before this has streamed (empty: nothing beyond the call's own line)."""
    chain_after: int = 0
    """The dependent calls of that chain (tool latencies after ``streamed_last``)."""
    real_run_only: bool = False
    """A call of the program runs only as the real run's own: a DESTRUCTIVE tool (invariant 2) or a call that
    raises (a speculation that raised is never served, invariant 5). The real run starts once the code block
    has streamed (plain ``exec`` runs nothing of a block that does not parse)."""

    def __post_init__(self) -> None:
        if self.streamed_last and self.streamed_last not in self.message:
            raise ValueError(f"{self.name}: streamed_last {self.streamed_last!r} is not in its message")
        if self.chain_after < 0 or (self.chain_after and not self.streamed_last):
            raise ValueError(f"{self.name}: chain_after must be >= 0, and 0 without streamed_last")


def _message(intro: str, code: str) -> str:
    return f"{intro}\n```repl\n{code.strip()}\n```\n"


SUITE: tuple[CodeProgram, ...] = (
    CodeProgram("map_loop", "map", 1, _message("I'll fetch every document in the list.", """
ids = ["doc-101", "doc-202", "doc-303", "doc-404", "doc-505", "doc-606", "doc-707", "doc-808"]
titles = []
for doc_id in ids:
    doc = fetch(doc_id)
    titles.append(doc["title"])
print(len(titles), titles[0], titles[-1])
""")),
    CodeProgram("map_comprehension", "map", 1, _message("Fetching all eight documents at once.", """
ids = ["doc-111", "doc-222", "doc-333", "doc-444", "doc-555", "doc-666", "doc-777", "doc-888"]
docs = [fetch(d) for d in ids]
print(sum(d["words"] for d in docs))
""")),
    CodeProgram("map_chain", "map", 2, _message("For each document: fetch it, then summarize its title.", """
ids = ["doc-121", "doc-232", "doc-343", "doc-454", "doc-565", "doc-676"]
summaries = []
for doc_id in ids:
    doc = fetch(doc_id)
    summaries.append(summarize(doc["title"]))
print(summaries)
""")),
    CodeProgram("tuple_args", "map", 1, _message("Where is each point? The tool takes (lat, lon) tuples.", """
points = [(52.5, 13.4), (48.9, 2.35), (40.7, -74.0), (35.7, 139.7), (-33.9, 151.2), (19.4, -99.1)]
cities = [place(p) for p in points]
print(cities)
""")),
    CodeProgram("search_then_fetch", "chain", 2, _message("Search first, then read the hits.", """
hits = search("speculative tool execution")
docs = [fetch(h) for h in hits]
best = max(docs, key=lambda d: d["score"])
print(best["id"], best["score"])
""")),
    CodeProgram("dependent_chain", "chain", 4, _message("Each lookup depends on the one before.", """
a = lookup("start")
b = lookup(f"next-{a}")
c = lookup(f"next-{b}")
d = lookup(f"next-{c}")
print(a, b, c, d)
""")),
    CodeProgram("conditional", "branch", 2, _message("Check the weather and read up on the warm cities.", """
cities = ["Paris", "Oslo", "Lima", "Cairo"]
reports = {}
for city in cities:
    w = weather(city)
    if w["temp"] > 15:
        reports[city] = search(f"things to do in {city}", k=2)
    else:
        reports[city] = []
print(reports)
""")),
    CodeProgram("loop_accumulate", "loop", 1, _message("Summing prices over a basket.", """
basket = ["AAPL", "MSFT", "NVDA", "AMZN", "GOOG", "META"]
total = 0
count = 0
for symbol in basket:
    total += price(symbol)
    count += 1
print(count, total, round(total / count))
""")),
    CodeProgram("while_pages", "loop", 1, streamed_last="page += 1\n", chain_after=1, message=_message(
        "Paging through the search results.", """
page = 1
found = []
while page <= 5:
    batch = search(f"quarterly report page {page}", k=2)
    found.extend(batch)
    page += 1
print(len(found), found[:3])
""")),
    CodeProgram("mixed_dependencies", "chain", 2, _message("Search, and meanwhile gather the rest.", """
hits = search("annual revenue", k=2)
top = fetch(hits[0])
paris = weather("Paris")
oslo = weather("Oslo")
cost = price("AAPL")
print(top["title"], paris["temp"], oslo["temp"], cost)
""")),
    CodeProgram("nested_def", "def", 2, streamed_last='"doc-464"', chain_after=2, message=_message(
        "A helper that fetches and summarizes.", """
def brief(doc_id):
    doc = fetch(doc_id)
    return summarize(doc["title"] + " " + str(doc["words"]))

briefs = [brief(i) for i in ["doc-131", "doc-242", "doc-353", "doc-464"]]
print(briefs)
""")),
    CodeProgram("dict_building", "dict", 1, _message("Prices in two currencies.", """
symbols = ["AAPL", "MSFT", "NVDA"]
table = {s: {"usd": price(s), "eur": price(s, currency="EUR")} for s in symbols}
print(table)
""")),
    CodeProgram("safe_imports", "imports", 1, _message("Some statistics on the scores.", """
import json
import math
import statistics
docs = [fetch(d) for d in ["doc-141", "doc-252", "doc-363", "doc-474", "doc-585"]]
scores = [d["score"] for d in docs]
print(json.dumps({"mean": statistics.mean(scores), "root": math.isqrt(sum(scores))}))
""")),
    CodeProgram("unsafe_import", "imports", 1, _message("Reading an environment setting, then fetching.", """
import os
prefix = os.environ.get("FORETHOUGHT_BENCH_PREFIX", "doc")
docs = [fetch(f"{prefix}-{n}") for n in range(151, 157)]
print([d["title"] for d in docs])
""")),
    CodeProgram("non_literal_args", "args", 1, _message("Arguments computed on the fly.", """
base = 160
queries = {"first": base + 1, "second": base * 2, "third": base // 3}
docs = {}
for name, n in queries.items():
    docs[name] = fetch(f"doc-{n:03d}")
scaled = [price(sym.upper() + str(len(sym))) for sym in ["ab", "cde", "fghi"]]
print(docs, scaled)
""")),
    CodeProgram("exception_mid", "error", 1, _message("Parse the counts (one of them is broken).", """
docs = [fetch(d) for d in ["doc-171", "doc-282", "doc-393"]]
counts = [int(d["title"].split("-")[-1]) for d in docs]
broken = int("n/a")
more = [fetch(d) for d in ["doc-404", "doc-515"]]
print(counts, more)
""")),
    CodeProgram("tool_error", "error", 1, real_run_only=True, message=_message("Look up a few keys.", """
first = lookup("alpha")
second = lookup("beta")
third = lookup("no-such-key")
fourth = lookup("gamma")
print(first, second, third, fourth)
""")),
    CodeProgram("no_tools", "compute", 0, _message("No tools needed, just arithmetic.", """
squares = [n * n for n in range(1, 30)]
odd = [s for s in squares if s % 2]
print(sum(odd), max(squares))
""")),
    CodeProgram("wide_fanout", "wide", 1, _message("The weather in twelve cities at once.", """
cities = ["Paris", "Oslo", "Lima", "Cairo", "Delhi", "Quito", "Perth", "Tokyo", "Rome", "Bern", "Riga", "Kyiv"]
report = [weather(c) for c in cities]
print(sum(r["temp"] for r in report), report[-1]["sky"])
""")),
    CodeProgram("long_program", "long", 1, _message("Quotes for twenty symbols, one after another.", """
symbols = ["AAPL", "MSFT", "NVDA", "AMZN", "GOOG", "META", "TSLA", "AVGO", "ORCL", "ADBE",
           "CRM", "AMD", "INTC", "CSCO", "QCOM", "TXN", "IBM", "NOW", "INTU", "AMAT"]
quotes = {}
for s in symbols:
    quotes[s] = price(s)
print(max(quotes, key=quotes.get), sum(quotes.values()))
""")),
    CodeProgram("write_after_reads", "write", 1, real_run_only=True, message=_message(
        "Read the weather, then send one message.", """
temps = {c: weather(c)["temp"] for c in ["Delhi", "Quito", "Perth", "Tokyo"]}
hottest = max(temps, key=temps.get)
status = notify(f"Hottest: {hottest} at {temps[hottest]} C")
print(status, temps)
""")),
)

MAP_PROGRAMS = tuple(p.name for p in SUITE if p.kind == "map")


def program(name: str) -> CodeProgram:
    for p in SUITE:
        if p.name == name:
            return p
    raise KeyError(name)
