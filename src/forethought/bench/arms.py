"""Benchmark arms: which parts of forethought each arm switches on.

``serial`` is the baseline every other arm is compared against (and checked equivalent to). The other
arms add one or more sources of guesses: the speculator model (``spec-model``), streaming early dispatch
(``spec-stream``), mined patterns (``spec-pattern``), patterns plus streaming (``pattern+stream``: no
second model, every part real), and everything together (``all``). ``oracle`` speculates the true next
calls at step start with no speculator time: the limit of overlap on the workload, which every arm's
saving is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass

from forethought.errors import ForethoughtError


@dataclass(frozen=True, slots=True)
class Arm:
    """One configuration of the agent for the benchmark."""

    name: str
    speculate: bool
    early_dispatch: bool
    model: bool
    patterns: bool
    oracle: bool = False
    """Speculates the true next calls at step start (bench-only: the limit of overlap)."""

    @property
    def description(self) -> str:
        if not self.speculate:
            return "serial baseline"
        if self.oracle:
            return "oracle: the true next calls at step start, no speculator time"
        parts = [p for p, on in (("speculator model", self.model), ("patterns", self.patterns),
                                 ("stream dispatch", self.early_dispatch)) if on]
        return " + ".join(parts)


ARMS: dict[str, Arm] = {
    "serial": Arm("serial", speculate=False, early_dispatch=False, model=False, patterns=False),
    "spec-model": Arm("spec-model", speculate=True, early_dispatch=False, model=True, patterns=False),
    "spec-stream": Arm("spec-stream", speculate=True, early_dispatch=True, model=False, patterns=False),
    "spec-pattern": Arm("spec-pattern", speculate=True, early_dispatch=False, model=False, patterns=True),
    "pattern+stream": Arm("pattern+stream", speculate=True, early_dispatch=True, model=False, patterns=True),
    "all": Arm("all", speculate=True, early_dispatch=True, model=True, patterns=True),
    "oracle": Arm("oracle", speculate=True, early_dispatch=True, model=False, patterns=False, oracle=True),
}

DEFAULT_ARMS = ("serial", "spec-model", "spec-stream", "spec-pattern", "pattern+stream", "all", "oracle")


def parse_arms(text: str) -> tuple[Arm, ...]:
    """Arms from a comma-separated list; ``serial`` is always included, first."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ARMS]
    if unknown:
        raise ForethoughtError(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    ordered = ["serial", *[n for n in names if n != "serial"]]
    return tuple(ARMS[n] for n in dict.fromkeys(ordered))
