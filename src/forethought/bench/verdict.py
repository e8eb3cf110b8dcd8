"""The bench's verdict in words: the speed result with its spread, equivalence, and a busy-machine warning.

A table of numbers invites the wrong reading when the machine was busy or the spread is wide, so the
report leads with sentences that say what was measured, how much it varied over the repeats, what share
of the oracle's saving each arm reached, and — plainly — when the load average or the event-loop lag
says the timings are not to be trusted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BUSY_LOAD_PER_CORE = 0.75
"""A 1-minute load average above this many runnable processes per core marks the machine busy."""
BUSY_LAG_P99_MS = 20.0
"""An event-loop lag p99 above this (milliseconds) marks the machine busy."""
SLOWER_THAN_SERIAL = -0.02
"""A median time saved below this is reported as slower than serial."""


def _pct(value: float) -> str:
    return f"{100.0 * value:+.1f}%"


def _spread(arm: Mapping[str, Any]) -> str:
    spread = arm.get("time_saved_spread")
    if not spread:
        return ""
    low, high = spread
    return f" (range {_pct(low)} to {_pct(high)})"


def machine_busy(machine: Mapping[str, Any]) -> bool:
    """Whether the load average or the measured lag says the machine was busy during the run."""
    cores = max(1, int(machine.get("cores", 1)))
    load = max(float(machine.get("load_1m_start", 0.0)), float(machine.get("load_1m_end", 0.0)))
    return load > BUSY_LOAD_PER_CORE * cores or float(machine.get("lag_p99_ms", 0.0)) > BUSY_LAG_P99_MS


def verdict(arms: Mapping[str, Mapping[str, Any]], equivalent: bool, machine: Mapping[str, Any],
            repeats: int) -> list[str]:
    """Sentences for the top of the report (and the console), most important first."""
    lines: list[str] = []
    if machine_busy(machine):
        lines.append(
            f"WARNING: the machine was busy while this ran (load average {machine.get('load_1m_start', 0):.1f} "
            f"at start, {machine.get('load_1m_end', 0):.1f} at end, on {machine.get('cores')} cores; event-loop "
            f"lag p99 {machine.get('lag_p99_ms', 0.0):.0f} ms). Timings are unreliable: compare arms only within "
            "this run, or rerun on an idle machine.")
    real = {name: a for name, a in arms.items() if name not in ("serial", "oracle")}
    over = f" over {repeats} repeat{'s' if repeats != 1 else ''}"
    if real:
        best_name, best = max(real.items(), key=lambda item: float(item[1]["time_saved"]))
        lines.append(f"Fastest arm: {best_name}, {_pct(float(best['time_saved']))} wall time saved against serial"
                     f"{_spread(best)}{over} (median; {float(best['speedup']):.2f}x).")
    oracle = arms.get("oracle")
    if oracle is not None:
        lines.append(f"Oracle (the true next calls at step start, no speculator time): "
                     f"{_pct(float(oracle['time_saved']))}{_spread(oracle)}: the limit of overlap here.")
        shares = [f"{name} {100.0 * float(a['oracle_share']):.0f}%" for name, a in real.items()
                  if a.get("oracle_share") is not None]
        if shares:
            lines.append("Share of the oracle's saving: " + ", ".join(shares) + ".")
    slower = [f"{name} {_pct(float(a['time_saved']))}{_spread(a)}" for name, a in real.items()
              if float(a["time_saved"]) < SLOWER_THAN_SERIAL]
    if slower:
        lines.append("Slower than serial: " + "; ".join(slower) + ".")
    backed = [f"{name} {int(a['backoffs'])}" for name, a in real.items() if float(a.get("backoffs", 0)) > 0]
    if backed:
        lines.append("Speculation backed off under load (changes of load state, median per repeat): "
                     + ", ".join(backed) + ".")
    if equivalent:
        lines.append("Every arm's tool outputs and final states equal serial's.")
    else:
        lines.append("NOT EQUIVALENT: some arm's tool outputs or final states differ from serial's (see the JSON).")
    return lines
