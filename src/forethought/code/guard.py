"""The shadow's resource guard: the helpers instrumented shadow code calls, and the budgets they enforce.

The instrumenter (:mod:`forethought.code.instrument`) rewrites shadow code so that every loop and
function body ticks the step counter, every call goes through :meth:`Guard.call`, every comprehension or
star-unpacking iterates through :meth:`Guard.iterate`, and the operators that can blow up a size (``*``,
``**``, ``<<``, ``+``, ``%``) go through :meth:`Guard.binop`. Budgets are per statement (steps, CPU seconds
not spent waiting for speculations, bytes of large results, call depth) with hard size limits on strings,
sequences and integers; crossing one raises :class:`ShadowBudgetExceeded`, which skips the statement.
"""

from __future__ import annotations

import operator
import os
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from forethought.code.cell import Cell
from forethought.code.signals import (
    ShadowBlocked,
    ShadowBudgetExceeded,
    ShadowSignal,
    ShadowStopped,
    ShadowToolFailed,
)

SHADOW_FILENAME = "<shadow>"
BLOCKED_ATTRIBUTES = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "cr_frame", "cr_code", "cr_await", "cr_origin",
    "ag_frame", "ag_code", "ag_await", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_trace",
    "f_lasti", "tb_frame", "tb_next", "tb_lasti", "co_code", "co_consts", "mro", "format_map", "func_globals",
    "func_code", "im_func", "im_self", "im_class", "with_traceback"})
_CHECK_EVERY = 0x3FF
_RSS_EVERY = 0xFFFF
_WAIT_SLICE_S = 0.05
_SMALL = 1 << 16
_SMALL_EXPONENT = 4096
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True, slots=True)
class ShadowLimits:
    """Budgets of one shadow statement and hard size limits of the values it may create."""

    max_steps: int = 2_000_000
    max_cpu_s: float = 2.0
    max_wait_s: float = 60.0
    max_seq: int = 1_000_000
    max_str: int = 5_000_000
    max_int_bits: int = 1_000_000
    max_alloc_bytes: int = 256 << 20
    max_depth: int = 200
    max_rss_growth_bytes: int = 1 << 30
    max_copy_nodes: int = 200_000
    max_unroll: int = 64


def attribute_allowed(name: str) -> bool:
    """Whether shadow code may read or write an attribute of this name."""
    return not name.startswith("_") and name not in BLOCKED_ATTRIBUTES


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * int(_PAGE)
    except (OSError, ValueError, IndexError):
        return 0


def _size(value: Any) -> int:
    kind = type(value)
    if kind is str:
        return len(value) * 4
    if kind in (bytes, list, tuple):
        return len(value) * (1 if kind is bytes else 8)
    if kind is int:
        return int(value.bit_length()) // 8
    return 0


_BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "*": operator.mul, "**": operator.pow, "<<": operator.lshift, "%": operator.mod}
_IOPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.iadd, "*": operator.imul, "**": operator.ipow, "<<": operator.ilshift, "%": operator.imod}


class Guard:
    """Budget keeper for one shadow thread; its methods are what instrumented code calls."""

    def __init__(self, limits: ShadowLimits) -> None:
        self.limits = limits
        self.classes: weakref.WeakSet[type] = weakref.WeakSet()
        self.stopped = False
        self.steps = 0
        self.alloc = 0
        self.depth = 0
        self.started = time.monotonic()
        self.waited = 0.0
        self.waiting_since: float | None = None
        self.touched_lazy = False
        self.thread_id: int | None = None
        self._rss_base = _rss_bytes()

    # --- statement lifecycle ----------------------------------------------------------------------

    def start_statement(self) -> None:
        self.steps = 0
        self.alloc = 0
        self.depth = 0
        self.waited = 0.0
        self.waiting_since = None
        self.touched_lazy = False
        self.started = time.monotonic()
        self.thread_id = threading.get_ident()

    def cpu_seconds(self) -> float:
        """Seconds the current statement has run, not counting waits for speculations."""
        now = time.monotonic()
        waiting = now - self.waiting_since if self.waiting_since is not None else 0.0
        return now - self.started - self.waited - waiting

    def check_stop(self) -> None:
        if self.stopped:
            raise ShadowStopped("the turn ended")

    # --- instrumentation hooks --------------------------------------------------------------------

    def tick(self) -> None:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise ShadowBudgetExceeded(f"more than {self.limits.max_steps} steps")
        if self.steps & _CHECK_EVERY == 0:
            self.check_stop()
            if self.cpu_seconds() > self.limits.max_cpu_s:
                raise ShadowBudgetExceeded(f"more than {self.limits.max_cpu_s:g} s of computation")
            if self.steps & _RSS_EVERY == 0 and _rss_bytes() - self._rss_base > self.limits.max_rss_growth_bytes:
                raise ShadowBudgetExceeded("process memory grew past the shadow's limit")

    def iterate(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Iterate ``iterable`` one step per element."""
        for item in iterable:
            self.tick()
            yield item

    def wrap_argument(self, value: Any) -> Any:
        """Route an iterator (or a huge range) through :meth:`iterate`, so C code consuming it stays bounded."""
        kind = type(value)
        if kind in (list, tuple, dict, set, frozenset, str, bytes, int, float, bool, type(None)):
            return value
        if kind is range:
            try:
                return value if len(value) <= self.limits.max_seq else self.iterate(value)
            except OverflowError:
                return self.iterate(value)
        if hasattr(kind, "__next__"):
            return self.iterate(value)
        return value

    def call(self, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Call ``func`` after the checks that keep C-level work bounded."""
        owner = getattr(func, "__self__", None)
        if isinstance(owner, str | bytes):
            self._check_string_method(owner, getattr(func, "__name__", ""), args)
        elif type(owner) is int or owner is int:
            self._check_int_method(getattr(func, "__name__", ""), args, kwargs)
        args = tuple(self.wrap_argument(a) for a in args)
        target = getattr(func, "__func__", func)
        if type(target) is types.FunctionType and target.__code__.co_filename == SHADOW_FILENAME:
            self.depth += 1
            try:
                if self.depth > self.limits.max_depth:
                    raise ShadowBudgetExceeded(f"calls nested deeper than {self.limits.max_depth}")
                return func(*args, **kwargs)
            finally:
                self.depth -= 1
        result = func(*args, **kwargs)
        self.sized(owner)
        return self._account(self.sized(result))

    def sized(self, value: Any) -> Any:
        """``value``, unless it is a string or container past the size limits (checked after the fact:
        growth by repeated doubling stops one step past the limit)."""
        kind = type(value)
        if kind in (str, bytes):
            if len(value) > self.limits.max_str:
                raise ShadowBudgetExceeded(f"string longer than {self.limits.max_str}")
        elif kind in (list, tuple, dict, set, frozenset) and len(value) > self.limits.max_seq:
            raise ShadowBudgetExceeded(f"container larger than {self.limits.max_seq}")
        return value

    def _check_string_method(self, owner: str | bytes, name: str, args: tuple[Any, ...]) -> None:
        limit = self.limits.max_str
        if name in ("ljust", "rjust", "center", "zfill") and args and isinstance(args[0], int):
            size = args[0]
        elif name == "expandtabs":
            tab = args[0] if args and isinstance(args[0], int) else 8
            size = len(owner) * max(1, tab)
        elif name == "replace" and len(args) >= 2 and isinstance(args[0], str | bytes) and isinstance(
                args[1], str | bytes):
            old, new = args[0], args[1]
            count = owner.count(old) if old else len(owner) + 1  # type: ignore[arg-type]
            size = len(owner) + count * max(0, len(new) - len(old))
        else:
            return
        if size > limit:
            raise ShadowBudgetExceeded(f"str.{name} would build more than {limit} characters")

    def _check_int_method(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        length = args[0] if args else kwargs.get("length", 1)
        if name == "to_bytes" and isinstance(length, int) and length > self.limits.max_str:
            raise ShadowBudgetExceeded(f"int.to_bytes longer than {self.limits.max_str}")

    def binop(self, op: str, left: Any, right: Any) -> Any:
        self._check_binop(op, left, right)
        return self._account(_BINOPS[op](left, right))

    def iop(self, op: str, left: Any, right: Any) -> Any:
        self._check_binop(op, left, right)
        return self._account(_IOPS[op](left, right))

    def _check_binop(self, op: str, left: Any, right: Any) -> None:
        limits = self.limits
        lt, rt = type(left), type(right)
        if op == "**" and lt is int and rt is int:
            if abs(left) > 1 and right > 0 and right * left.bit_length() > limits.max_int_bits:
                raise ShadowBudgetExceeded(f"integer power above {limits.max_int_bits} bits")
        elif op == "**" and rt is int and right > _SMALL_EXPONENT and lt not in (int, float, complex):
            raise ShadowBudgetExceeded("power with a huge exponent")
        elif op == "<<" and lt is int and rt is int:
            if right > limits.max_int_bits:
                raise ShadowBudgetExceeded(f"shift above {limits.max_int_bits} bits")
        elif op == "*":
            if lt is int and rt is int:
                if left.bit_length() + right.bit_length() > limits.max_int_bits:
                    raise ShadowBudgetExceeded(f"integer product above {limits.max_int_bits} bits")
            elif lt in (str, bytes, list, tuple) and rt is int:
                self._check_length(lt, len(left) * right)
            elif rt in (str, bytes, list, tuple) and lt is int:
                self._check_length(rt, len(right) * left)
        elif op == "+" and lt is rt and lt in (str, bytes, list, tuple):
            self._check_length(lt, len(left) + len(right))
        elif op == "%" and lt in (str, bytes) and _has_wide_field(left):
            raise ShadowBudgetExceeded("%-format with a huge field width")

    def _check_length(self, kind: type, length: int) -> None:
        limit = self.limits.max_str if kind in (str, bytes) else self.limits.max_seq
        if length > limit:
            raise ShadowBudgetExceeded(f"{kind.__name__} longer than {limit}")

    def _account(self, value: Any) -> Any:
        size = _size(value)
        if size > _SMALL:
            self.alloc += size
            if self.alloc > self.limits.max_alloc_bytes:
                raise ShadowBudgetExceeded(f"statement built more than {self.limits.max_alloc_bytes} bytes")
        return value

    def setattr(self, obj: Any, name: str, value: Any) -> None:
        self._check_attribute_target(obj, name)
        setattr(obj, name, value)

    def delattr(self, obj: Any, name: str) -> None:
        self._check_attribute_target(obj, name)
        delattr(obj, name)

    def _check_attribute_target(self, obj: Any, name: str) -> None:
        if not isinstance(name, str) or not attribute_allowed(name):
            raise ShadowBlocked(f"attribute {name!r} is not accessible in the shadow")
        target = obj if isinstance(obj, type) else type(obj)
        if isinstance(obj, types.FunctionType) and obj.__code__.co_filename == SHADOW_FILENAME:
            return
        if not any(cls in self.classes for cls in target.__mro__):
            raise ShadowBlocked(f"cannot set attributes on {target.__name__} objects in the shadow")

    def reraise(self) -> None:
        """Re-raise a shadow signal caught by a model-written ``except`` handler."""
        error = sys.exc_info()[1]
        if isinstance(error, ShadowSignal):
            raise error

    # --- waiting ----------------------------------------------------------------------------------

    def wait_cell(self, cell: Cell) -> Any:
        """Wait for a speculation's cell on the shadow thread (the wait does not count as computation)."""
        self.touched_lazy = True
        if not cell.done():
            self.waiting_since = time.monotonic()
            deadline = self.waiting_since + self.limits.max_wait_s
            try:
                while not cell.wait(_WAIT_SLICE_S):
                    self.check_stop()
                    if time.monotonic() > deadline:
                        raise ShadowBlocked("waited too long for a speculated result")
            finally:
                self.waited += time.monotonic() - self.waiting_since
                self.waiting_since = None
        error = cell.error()
        if error is None:
            return cell.result()
        if isinstance(error, ShadowSignal):
            raise error
        raise ShadowToolFailed(f"{type(error).__name__}: {error}")


def _has_wide_field(text: str | bytes) -> bool:
    """Whether a %-format string holds a width or precision of seven digits or more."""
    digits = 0
    for ch in text if isinstance(text, str) else text.decode("latin-1"):
        digits = digits + 1 if ch.isdigit() else 0
        if digits >= 7:
            return True
    return False
