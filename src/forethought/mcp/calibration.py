"""Whether a guess pays where it runs: the core's price of a guess, less what the proxy and the server pay.

The core prices a guess (:meth:`~forethought._core.runtime.Runtime.price`): its calibrated chance of a hit (per
guess source and confidence bin; the proxy names a source per tool, so that is a hit rate per tool), the tool's
measured runtime (what a hit can hide, up to the client's expected think time) and what a miss wastes. The proxy
adds what only it knows (:meth:`Calibrator.price`):

- **the overhead of a guess**: what sending it, handling its answer and serving it costs the proxy and the
  client's next call (``guess_overhead_s``, measured by the overhead bench). A tool that answers faster than
  that never pays, whatever the guess's chance, and is never guessed;
- **the delay a wrong guess causes on a server that handles one call at a time**: the part of the guess's run
  still going when the client's next call comes, weighted by how likely the server is to be serial
  (:mod:`~forethought.mcp.concurrency`).

A guess is made only when what it is expected to hide exceeds all of that. And predicting itself costs, at
every answer, whether a guess follows or not (the predictor's work, in a worker that shares the machine with
the client and the server): :class:`Payoff` keeps, per tool set, the seconds hits saved and the seconds
predictions cost, per answer predicted at: the wall time of a predictor on the proxy's own loop, which it
blocks; a worker's CPU seconds for each prediction times the machine's contention, the load average per
core (at most 1): a worker's second on a core nobody else wanted delays nobody, one on a saturated machine
delays someone by as much (:func:`machine_contention`). Once enough answers are counted and the hits saved less than the
predictions cost, the proxy stops predicting there (it still predicts at one answer in
``EXPLORE_EVERY``, so that it learns if that changes; the payoff the store carries weighs as
:data:`CARRIED_ANSWERS` answers at most, so a process's own answers soon outweigh earlier ones, and it leaves
out predictions that came after the client's next call: they tell how soon that client calls, which the
think time already handles, not what predicting earns for a client that waits). What was
measured (the runtimes, the hit rates per tool and confidence, the concurrency evidence) is carried across
sessions and processes in the store (:class:`CalibrationStore`), so a proxy starts from what earlier sessions
learnt about the server.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from forethought._core.pricing import BINS, Calibration
from forethought._core.runtime import Runtime
from forethought._core.tools import Tool
from forethought.mcp.concurrency import Concurrency

GUESS_OVERHEAD_S = 0.002
"""What one guess costs beyond the server's own work: the proxy's time to send it, take its answer and serve
it, and the client's next call's share of the upstream connection (docs/benchmarks.md, MCP: the profile)."""
THINK_WEIGHT = 0.3
"""Weight of the newest gap in the moving average of the client's think time."""
MIN_ANSWERS = 20
"""Answers predicted at before the payoff of predicting is judged."""
EXPLORE_EVERY = 10
"""Where predicting does not pay, it is still done at one answer in this many."""
CARRIED_ANSWERS = 2 * MIN_ANSWERS
"""The payoff carried from the store weighs as this many answers at most (its ratio kept): what earlier
processes saw, with another client or another think time, decides until this process's own answers
outweigh it (the store itself keeps every answer)."""
MAX_REPLAYED = 10_000
"""The most guesses of one stored calibration row replayed into a session's calibration (scaled, hit rate kept)."""
log = logging.getLogger(__name__)

CALIBRATION_TABLE = "mcp_calibration"
RUNTIMES_TABLE = "mcp_runtimes"
CONCURRENCY_TABLE = "mcp_concurrency"
PAYOFF_TABLE = "mcp_payoff"
BUSY_TIMEOUT_S = 5.0


class Priced(NamedTuple):
    """A guess's price: the core's value, and what the proxy adds to its cost."""

    p_hit: float
    hide_s: float
    core_value_s: float
    overhead_s: float
    serial_s: float

    @property
    def value_s(self) -> float:
        """Seconds a guess is expected to save, net of everything it costs."""
        return self.core_value_s - self.overhead_s - self.serial_s


@dataclass(frozen=True, slots=True)
class Verdict:
    """The calibration's decision for one tool, as reported (stats, the bench)."""

    tool: str
    run_s: float
    p_hit: float
    value_s: float
    speculate: bool
    reason: str


@dataclass(slots=True)
class Payoff:
    """What predicting earned and cost, per answer predicted at (carried across sessions in the store)."""

    answers: int = 0
    saved_s: float = 0.0
    predict_s: float = 0.0

    @property
    def pays(self) -> bool:
        """Whether predicting is worth its cost here (assumed, until :data:`MIN_ANSWERS` are counted)."""
        return self.answers < MIN_ANSWERS or self.saved_s >= self.predict_s

    def explains(self) -> str:
        n = max(1, self.answers)
        return (f"hits saved {1000 * self.saved_s / n:.1f} ms per answer, predicting cost "
                f"{1000 * self.predict_s / n:.1f} ms ({self.answers} answers)")


def machine_contention() -> float:
    """The share of a worker's CPU second that delays other work now: the 1-minute load average per core,
    at most 1 (1 where the platform has no load average)."""
    try:
        return min(1.0, max(0.0, os.getloadavg()[0] / max(1, os.cpu_count() or 1)))
    except OSError:
        return 1.0


class Calibrator:
    """The proxy's pricing of guesses for one server (shared by the client sessions of a proxy process)."""

    def __init__(self, runtime: Runtime, concurrency: Concurrency, overhead_s: float = GUESS_OVERHEAD_S,
                 contention: Callable[[], float] = machine_contention) -> None:
        self.runtime = runtime
        self.concurrency = concurrency
        self.overhead_s = overhead_s
        self.contention = contention
        """How much of a worker's CPU time delays other work (0..1; :func:`machine_contention`)."""
        self.payoff = Payoff()
        """What predicting earned and cost here."""
        self.late = Payoff()
        """The part of :attr:`payoff` spent on predictions that came after the client's next call: counted here,
        never carried (:class:`Carried`)."""
        self._skipped = 0
        self.think_s: float | None = None
        """The client's typical think time: from an answer to its next call (moving average)."""
        self.verdicts: dict[str, Verdict] = {}
        """The latest decision per tool."""

    def should_predict(self) -> bool:
        """Whether to predict at this answer: where predicting pays, always; elsewhere one in ``EXPLORE_EVERY``."""
        if self.payoff.pays:
            return True
        self._skipped += 1
        if self._skipped >= EXPLORE_EVERY:
            self._skipped = 0
            return True
        return False

    def predicted(self, seconds: float, on_worker: bool = False, late: bool = False) -> None:
        """A prediction took ``seconds``: of a worker's CPU (``on_worker``: counted times the contention now),
        or of the proxy's own loop (counted whole). ``late``: it came after the client's next call, so it could
        not have saved anything whatever it said."""
        if on_worker:
            seconds *= min(1.0, max(0.0, self.contention()))
        seconds = max(0.0, seconds)
        self.payoff.answers += 1
        self.payoff.predict_s += seconds
        if late:
            self.late.answers += 1
            self.late.predict_s += seconds

    def saved(self, seconds: float) -> None:
        """A hit saved ``seconds``."""
        self.payoff.saved_s += max(0.0, seconds)

    def note_gap(self, seconds: float) -> None:
        """The client's next call came ``seconds`` after the previous answer went out."""
        if seconds >= 0:
            old = self.think_s
            self.think_s = seconds if old is None else old + THINK_WEIGHT * (seconds - old)

    def pays_at_all(self, t: Tool) -> bool:
        """Whether a guess of ``t`` could ever pay: what it could hide — its typical runtime (measured, else
        declared, else assumed), but no more than the client's typical think time — exceeds the overhead of a
        guess. A tool faster than that is never guessed, and neither is anything for a client that sends its
        calls back to back."""
        run = self.runtime.typical_run_s(t)
        return min(run, self.think_s if self.think_s is not None else run) > self.overhead_s

    def price(self, t: Tool, source: str, confidence: float) -> Priced:
        worth, _ = self.runtime.price(t, source, confidence, self.think_s)
        run = self.runtime.typical_run_s(t)
        still_running = max(0.0, run - (self.think_s or 0.0))
        serial = self.concurrency.serial_p * (1.0 - worth.p_hit) * still_running
        return Priced(worth.p_hit, worth.hide_s, worth.value, self.overhead_s, serial)

    def decide(self, t: Tool, source: str, confidence: float) -> Verdict:
        """Price a guess of ``t`` and record the decision (``speculate``: worth making)."""
        run = self.runtime.typical_run_s(t)
        if not self.pays_at_all(t):
            why = (f"answers in {1000 * run:.1f} ms" if run <= self.overhead_s
                   else f"the client calls {1000 * (self.think_s or 0.0):.1f} ms after an answer")
            verdict = Verdict(t.label, run, 0.0, 0.0, False,
                              f"{why}, under a guess's {1000 * self.overhead_s:.1f} ms")
        else:
            priced = self.price(t, source, confidence)
            pays = priced.value_s > 0
            verdict = Verdict(t.label, run, priced.p_hit, priced.value_s, pays,
                              "pays" if pays else f"not worth it: {1000 * priced.value_s:+.1f} ms expected")
        self.verdicts[t.label] = verdict
        return verdict


@dataclass(frozen=True, slots=True)
class Learnt:
    """What the store holds for one tool set: calibration rows, typical runtimes, concurrency evidence."""

    calibration: tuple[tuple[str, int, int, float, float], ...] = ()
    """(source, bin, guesses, hits, confidence sum) rows."""
    runtimes: Mapping[str, float] | None = None
    serial: int = 0
    concurrent: int = 0
    payoff: Payoff | None = None


def calibration_rows(calibration: Calibration) -> dict[tuple[str, int], tuple[int, float, float]]:
    """The calibration's counts by (source, bin): guesses, hits, confidence sum."""
    rows: dict[tuple[str, int], tuple[int, float, float]] = {}
    for row in calibration.table():
        b = round(row.low * BINS)
        rows[(row.source, b)] = (row.guesses, row.hit_rate * row.guesses, row.mean_confidence * row.guesses)
    return rows


def replay(calibration: Calibration, rows: Iterable[tuple[str, int, int, float, float]]) -> None:
    """Add stored counts to ``calibration`` through its public ``record`` (the core has no bulk load); a row of
    more than :data:`MAX_REPLAYED` guesses is replayed scaled down to that many, its hit rate kept."""
    for source, _b, guesses, hits, confidence_sum in rows:
        if guesses <= 0:
            continue
        mean = confidence_sum / guesses
        scale = min(1.0, MAX_REPLAYED / guesses)
        whole_hits = round(hits * scale)
        for i in range(round(guesses * scale)):
            calibration.record(source, mean, i < whole_hits)


def _count(value: object) -> int | None:
    """A stored count: a whole number from 0 up (``None``: garbled)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if value >= 0 and value == int(value) else None


def _amount(value: object) -> float | None:
    """A stored amount: a finite number from 0 up (``None``: garbled)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _checked(fingerprint: str, rows: Iterable[tuple[object, ...]], runtimes: Mapping[object, object],
             evidence: tuple[object, ...] | None, paid: tuple[object, ...] | None) -> Learnt:
    """What the store holds for a tool set, without the values another program garbled (each such row costs
    its own learning only, logged once per load; before, one stopped every session of the store)."""
    dropped = 0
    calibration: list[tuple[str, int, int, float, float]] = []
    for source, b, guesses, hits, confidence in rows:
        n, h, c = _count(guesses), _amount(hits), _amount(confidence)
        if not isinstance(source, str) or not isinstance(b, int) or n is None or h is None or c is None or h > n:
            dropped += 1
            continue
        calibration.append((source, b, n, h, c))
    seconds = {tool: _amount(value) for tool, value in runtimes.items()}
    kept = {tool: value for tool, value in seconds.items() if isinstance(tool, str) and value is not None}
    dropped += len(seconds) - len(kept)
    serial, concurrent = (_count(evidence[0]), _count(evidence[1])) if evidence else (0, 0)
    if serial is None or concurrent is None:
        dropped += 1
        serial = concurrent = 0
    payoff = None
    if paid:
        answers, saved, predict = _count(paid[0]), _amount(paid[1]), _amount(paid[2])
        if answers is None or saved is None or predict is None:
            dropped += 1
        else:
            payoff = Payoff(answers, saved, predict)
    if dropped:
        log.warning("the calibration store holds %d garbled rows for tool set %s: they are ignored", dropped,
                    fingerprint[:12])
    return Learnt(tuple(calibration), kept, serial, concurrent, payoff)


class CalibrationStore:
    """What was measured about a tool set, in the store's SQLite file; writers only add (deltas)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {CALIBRATION_TABLE} (fingerprint TEXT NOT NULL, source TEXT "
                           "NOT NULL, bin INTEGER NOT NULL, guesses INTEGER NOT NULL, hits REAL NOT NULL, confidence "
                           "REAL NOT NULL, PRIMARY KEY (fingerprint, source, bin))")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {RUNTIMES_TABLE} (fingerprint TEXT NOT NULL, tool TEXT NOT "
                           "NULL, seconds REAL NOT NULL, PRIMARY KEY (fingerprint, tool))")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {CONCURRENCY_TABLE} (fingerprint TEXT PRIMARY KEY, serial "
                           "INTEGER NOT NULL, concurrent INTEGER NOT NULL)")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {PAYOFF_TABLE} (fingerprint TEXT PRIMARY KEY, answers "
                           "INTEGER NOT NULL, saved_s REAL NOT NULL, predict_s REAL NOT NULL)")

    def load(self, fingerprint: str) -> Learnt:
        with self._lock:
            rows = self._conn.execute(f"SELECT source, bin, guesses, hits, confidence FROM {CALIBRATION_TABLE} "
                                      "WHERE fingerprint = ? ORDER BY source, bin", (fingerprint,)).fetchall()
            runtimes = dict(self._conn.execute(f"SELECT tool, seconds FROM {RUNTIMES_TABLE} WHERE fingerprint = ?",
                                               (fingerprint,)).fetchall())
            evidence = self._conn.execute(f"SELECT serial, concurrent FROM {CONCURRENCY_TABLE} WHERE fingerprint "
                                          "= ?", (fingerprint,)).fetchone()
            paid = self._conn.execute(f"SELECT answers, saved_s, predict_s FROM {PAYOFF_TABLE} WHERE fingerprint = ?",
                                      (fingerprint,)).fetchone()
        return _checked(fingerprint, rows, runtimes, evidence, paid)

    def add(self, fingerprint: str, calibration: Mapping[tuple[str, int], tuple[int, float, float]],
            runtimes: Mapping[str, float], serial: int, concurrent: int, payoff: Payoff | None = None) -> None:
        """Add counts (deltas), and set the latest typical runtimes."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for (source, b), (guesses, hits, confidence) in calibration.items():
                    self._conn.execute(
                        f"INSERT INTO {CALIBRATION_TABLE} VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(fingerprint, source, "
                        "bin) DO UPDATE SET guesses = guesses + excluded.guesses, hits = hits + excluded.hits, "
                        "confidence = confidence + excluded.confidence",
                        (fingerprint, source, b, guesses, hits, confidence))
                for tool, seconds in runtimes.items():
                    self._conn.execute(f"INSERT OR REPLACE INTO {RUNTIMES_TABLE} VALUES (?, ?, ?)",
                                       (fingerprint, tool, seconds))
                self._conn.execute(
                    f"INSERT INTO {CONCURRENCY_TABLE} VALUES (?, ?, ?) ON CONFLICT(fingerprint) DO UPDATE SET "
                    "serial = serial + excluded.serial, concurrent = concurrent + excluded.concurrent",
                    (fingerprint, serial, concurrent))
                if payoff is not None and payoff.answers:
                    self._conn.execute(
                        f"INSERT INTO {PAYOFF_TABLE} VALUES (?, ?, ?, ?) ON CONFLICT(fingerprint) DO UPDATE SET "
                        "answers = answers + excluded.answers, saved_s = saved_s + excluded.saved_s, "
                        "predict_s = predict_s + excluded.predict_s",
                        (fingerprint, payoff.answers, payoff.saved_s, payoff.predict_s))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class Carried:
    """What one proxy process carries across sessions for its server: the store's learnings for a tool set are
    added to the runtime once (the first time a session lists it), and what was learnt since is added back to
    the store at each session's end (deltas: several processes share the store)."""

    def __init__(self, calibrator: Calibrator, store: CalibrationStore | None) -> None:
        self.calibrator = calibrator
        self.store = store
        self._saved: dict[str, dict[tuple[str, int], tuple[int, float, float]]] = {}
        """Per tool set: the calibration counts as last loaded or saved."""
        self._evidence = (calibrator.concurrency.serial, calibrator.concurrency.concurrent)
        self._paid = Payoff()
        """The payoff counts the store may carry (:meth:`_carriable`), as last loaded or saved."""

    def listed(self, fingerprint: str) -> None:
        """A session listed the tool set ``fingerprint``: load what the store holds for it (once)."""
        if fingerprint in self._saved:
            return
        runtime = self.calibrator.runtime
        if self.store is not None:
            try:
                learnt = self.store.load(fingerprint)
            except sqlite3.Error:
                learnt = Learnt()
            replay(runtime.calibration, learnt.calibration)
            for tool, seconds in (learnt.runtimes or {}).items():
                if tool not in runtime.tool_runtime_ewma:
                    runtime.note_runtime(tool, seconds)
            concurrency = self.calibrator.concurrency
            concurrency.serial += learnt.serial
            concurrency.concurrent += learnt.concurrent
            self._evidence = (concurrency.serial, concurrency.concurrent)
            if learnt.payoff is not None and learnt.payoff.answers > 0:
                payoff = self.calibrator.payoff
                weight = min(1.0, CARRIED_ANSWERS / learnt.payoff.answers)
                payoff.answers += min(learnt.payoff.answers, CARRIED_ANSWERS)
                payoff.saved_s += learnt.payoff.saved_s * weight
                payoff.predict_s += learnt.payoff.predict_s * weight
            self._paid = self._carriable()
        self._saved[fingerprint] = calibration_rows(runtime.calibration)

    def save(self, fingerprint: str, tools: Iterable[str]) -> None:
        """Add what was learnt since the last save to the store (``tools``: the tool set's tools whose
        runtimes may be kept: private ones left out)."""
        if self.store is None or fingerprint not in self._saved:
            return
        runtime = self.calibrator.runtime
        now = calibration_rows(runtime.calibration)
        before = self._saved[fingerprint]
        delta = {}
        for key, (guesses, hits, confidence) in now.items():
            g0, h0, c0 = before.get(key, (0, 0.0, 0.0))
            if guesses > g0:
                delta[key] = (guesses - g0, hits - h0, confidence - c0)
        concurrency = self.calibrator.concurrency
        serial, concurrent = concurrency.serial - self._evidence[0], concurrency.concurrent - self._evidence[1]
        runtimes = {t: runtime.tool_runtime_ewma[t] for t in tools if t in runtime.tool_runtime_ewma}
        now_paid = self._carriable()
        paid = Payoff(now_paid.answers - self._paid.answers, now_paid.saved_s - self._paid.saved_s,
                      now_paid.predict_s - self._paid.predict_s)
        try:
            self.store.add(fingerprint, delta, runtimes, serial, concurrent, paid)
        except sqlite3.Error:
            return  # kept for the next save
        for other in self._saved:
            self._saved[other] = now
        self._evidence = (concurrency.serial, concurrency.concurrent)
        self._paid = now_paid

    def _carriable(self) -> Payoff:
        """The payoff counted so far less its late predictions: those say how soon this client calls, not what
        predicting earns for a client that leaves it time, so the store never carries them to other clients
        (this process still counts them: a worker too slow for its client stops predicting here)."""
        payoff, late = self.calibrator.payoff, self.calibrator.late
        return Payoff(payoff.answers - late.answers, payoff.saved_s, payoff.predict_s - late.predict_s)
