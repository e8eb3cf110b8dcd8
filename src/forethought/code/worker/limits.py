"""The shadow worker's limits: what one turn's worker process may use before the kernel or the parent stops it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShadowLimits:
    """Resource limits of one turn's shadow worker (enforced by the kernel, the wall clock by the parent).

    ``statement_cpu_s`` interrupts Python code of one statement that computes too long (later independent
    statements still run); ``cpu_s`` is the worker's whole CPU allowance (the kernel kills it past that,
    C-level work included); ``turn_wall_s`` is when the parent kills a worker still alive. ``scratch_bytes``
    and ``scratch_inodes`` bound the worker's whole scratch file system (a tmpfs of its own, whatever number
    of files it writes); ``max_threads`` bounds its processes and threads together (its own three included).
    """

    memory_bytes: int = 1 << 30
    cpu_s: float = 10.0
    statement_cpu_s: float = 2.0
    file_bytes: int = 16 << 20
    scratch_bytes: int = 16 << 20
    scratch_inodes: int = 1024
    max_threads: int = 32
    open_files: int = 64
    turn_wall_s: float = 300.0
    max_message_bytes: int = 1 << 20
    max_frame_tokens: int = 20_000
    """JSON values a frame from the worker may hold (bounded by :func:`~forethought.code.wire.token_bound`
    before it is parsed): what decoding one frame may cost the event loop."""
    max_result_bytes: int = 4 << 20
    """Bytes of strings in one result sent into the worker (larger results reach it as blocked)."""
    max_unroll: int = 64
    min_landlock_abi: int = 1
    """The lowest Landlock ABI the worker accepts (below it, code speculation turns itself off)."""
