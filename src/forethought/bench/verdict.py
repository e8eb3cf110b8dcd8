"""The bench's verdict in words: did speculation pay on this run, by how much, and how busy was the machine.

A table of numbers invites the wrong reading when the machine was busy or the spread is wide, so the
report leads with a headline (:func:`headline`) that says whether the best speculating arm was faster
than serial — in every repeat, on the median only, or not at all — by how much, and how loaded the
machine was, and then with sentences (:func:`verdict`) that give the spread over the repeats, the
fastest arm (only an arm faster than serial is called that), each arm's share of the oracle's saving
(only where the oracle itself saved time), and — plainly — when the load average or the event-loop lag
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
ORACLE_MIN_SAVED = 0.02
"""The oracle must save at least this fraction of serial's wall time (median, and more than nothing in every
repeat) for shares of its saving to mean anything; below it, a share is noise divided by noise."""
NOT_SPECULATING = ("serial", "oracle")
"""Arms that are not a speculation strategy: the baseline and the limit."""


def _pct(value: float) -> str:
    return f"{100.0 * value:+.1f}%"


def _range(arm: Mapping[str, Any]) -> tuple[float, float]:
    spread = arm.get("time_saved_spread")
    saved = float(arm["time_saved"])
    return (float(spread[0]), float(spread[1])) if spread else (saved, saved)


def _spread(arm: Mapping[str, Any]) -> str:
    if not arm.get("time_saved_spread"):
        return ""
    low, high = _range(arm)
    return f" (range {_pct(low)} to {_pct(high)})"


def machine_busy(machine: Mapping[str, Any]) -> bool:
    """Whether the load average or the measured lag says the machine was busy during the run."""
    cores = max(1, int(machine.get("cores", 1)))
    load = max(float(machine.get("load_1m_start", 0.0)), float(machine.get("load_1m_end", 0.0)))
    return load > BUSY_LOAD_PER_CORE * cores or float(machine.get("lag_p99_ms", 0.0)) > BUSY_LAG_P99_MS


def describe_machine(machine: Mapping[str, Any]) -> str:
    """How busy the machine was, in a clause: idle or busy, the load average per core and the lag."""
    cores = max(1, int(machine.get("cores", 1)))
    load = max(float(machine.get("load_1m_start", 0.0)), float(machine.get("load_1m_end", 0.0)))
    state = "busy" if machine_busy(machine) else "idle"
    return (f"the machine was {state} (load average up to {load:.1f} on {cores} core{'s' if cores != 1 else ''}, "
            f"event-loop lag p99 {float(machine.get('lag_p99_ms', 0.0)):.0f} ms)")


def oracle_saved(oracle: Mapping[str, Any] | None) -> bool:
    """Whether the oracle arm saved time on this run: at least :data:`ORACLE_MIN_SAVED` on the median and
    more than nothing in every repeat."""
    if oracle is None:
        return False
    return float(oracle["time_saved"]) >= ORACLE_MIN_SAVED and _range(oracle)[0] > 0.0


def oracle_share(saved: float, oracle: Mapping[str, Any] | None) -> float | None:
    """``saved`` as a fraction of the oracle's saving; ``None`` where the oracle saved no time to share."""
    if oracle is None or not oracle_saved(oracle):
        return None
    return saved / float(oracle["time_saved"])


def _speculating(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {name: a for name, a in arms.items() if name not in NOT_SPECULATING}


def headline(arms: Mapping[str, Mapping[str, Any]], machine: Mapping[str, Any], repeats: int) -> str:
    """The report's first line: whether speculation paid on this run, by how much, how busy the machine was."""
    where = describe_machine(machine)
    busy = machine_busy(machine)
    caveat = "; timings on a busy machine are unreliable" if busy else ""
    real = _speculating(arms)
    if not real:
        return f"No speculating arm ran, so nothing was compared with serial; {where}."
    name, best = max(real.items(), key=lambda item: float(item[1]["time_saved"]))
    saved, (low, high) = float(best["time_saved"]), _range(best)
    over = f"median of {repeats} repeat{'s' if repeats != 1 else ''}"
    if saved > 0.0 and low > 0.0:
        return (f"Speculation paid on this run: {name} took {100.0 * saved:.1f}% less wall time than serial "
                f"({over}, every repeat faster: {_pct(low)} to {_pct(high)}); {where}{caveat}.")
    if saved > 0.0:
        return (f"Speculation paid on the median only: {name} took {100.0 * saved:.1f}% less wall time than serial "
                f"({over}) but was slower in some repeat ({_pct(low)} to {_pct(high)}); {where}{caveat}.")
    return (f"Speculation did not pay on this run: no arm was faster than serial (the best, {name}, "
            f"{_pct(saved)}, {over}, range {_pct(low)} to {_pct(high)}); {where}{caveat}.")


def verdict(arms: Mapping[str, Mapping[str, Any]], equivalent: bool, machine: Mapping[str, Any],
            repeats: int) -> list[str]:
    """Sentences for the top of the report (and the console): the headline first, then the details."""
    lines = [headline(arms, machine, repeats)]
    if machine_busy(machine):
        lines.append(
            f"WARNING: the machine was busy while this ran (load average {machine.get('load_1m_start', 0):.1f} "
            f"at start, {machine.get('load_1m_end', 0):.1f} at end, on {machine.get('cores')} cores; event-loop "
            f"lag p99 {machine.get('lag_p99_ms', 0.0):.0f} ms). Timings are unreliable: compare arms only within "
            "this run, or rerun on an idle machine.")
    real = _speculating(arms)
    over = f" over {repeats} repeat{'s' if repeats != 1 else ''}"
    faster = {name: a for name, a in real.items() if float(a["time_saved"]) > 0.0}
    if faster:
        best_name, best = max(faster.items(), key=lambda item: float(item[1]["time_saved"]))
        lines.append(f"Fastest arm: {best_name}, {_pct(float(best['time_saved']))} wall time saved against serial"
                     f"{_spread(best)}{over} (median; {float(best['speedup']):.2f}x).")
    oracle = arms.get("oracle")
    if oracle is not None:
        if oracle_saved(oracle):
            lines.append(f"Oracle (the true next calls at step start, no speculator time): "
                         f"{_pct(float(oracle['time_saved']))}{_spread(oracle)}: the limit of overlap here.")
            shares = [f"{name} {100.0 * share:.0f}%" for name, a in faster.items()
                      if (share := oracle_share(float(a["time_saved"]), oracle)) is not None]
            if shares:
                lines.append("Share of the oracle's saving: " + ", ".join(shares) + ".")
        else:
            lines.append(f"Oracle (the true next calls at step start, no speculator time): "
                         f"{_pct(float(oracle['time_saved']))}{_spread(oracle)}: even perfect guesses saved no "
                         "clear time on this run, so no arm's share of it is given.")
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
