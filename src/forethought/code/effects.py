"""Effects of model code outside its namespace, seen through the interpreter's audit events (PEP 578).

A file written or removed, the environment or working directory changed, a process started, a connection
made, a C function called through ``ctypes``: any of these may change what a ``READ_ONLY`` tool returns,
and none of them is a tool call the session records. :func:`is_effect` classifies an audit event (every
event but a short list of harmless ones counts, and ``open`` only when it opens for writing); a thread
*observing* (:func:`observing`) has its effects reported to an observer as they happen, before the effect
itself. The shadow worker uses this to end the speculation of reads after a statement with an effect; the
real run uses it to advance the session's write clock from the moment one of its statements has one.

The audit hook is installed once per process (:func:`install`; audit hooks cannot be removed) and costs
every audited event a thread-local lookup; threads that observe nothing are never reported. Audit events are
not a security boundary (the worker's kernel isolation is): they miss writes through descriptors opened
before a block and C extensions that skip the interpreter's audited calls.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

HARMLESS_EVENTS = frozenset({
    "exec", "compile", "import", "builtins.id", "builtins.input", "builtins.input/result", "code.__new__",
    "function.__new__",
    "function.__code__", "object.__getattr__", "sys._getframe", "sys._getframemodulename", "sys._current_frames",
    "sys._current_exceptions", "sys.excepthook", "sys.unraisablehook", "marshal.loads", "marshal.load",
    "marshal.dumps", "pickle.find_class", "array.__new__", "os.listdir", "os.scandir", "os.listxattr",
    "os.getxattr", "glob.glob", "glob.glob/2", "time.sleep", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "socket.gethostname", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.getnameinfo", "socket.getservbyname",
    "socket.getservbyport", "sys.addaudithook",
    "sqlite3.connect/handle", "shutil.unpack_archive/read", "ctypes.addressof", "ctypes.get_errno",
    "ctypes.get_last_error"})
"""Audit events that change nothing outside the process (reads, introspection, compilation, imports' own
bookkeeping). Everything else counts as an effect: unknown events are assumed to have one, and reaching C
through ``ctypes`` (``ctypes.dlopen``, ``ctypes.dlsym``, ...) is one: calling what it finds raises no event."""
_WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_WRITING_MODES = frozenset("wax+")


def is_effect(event: str, args: tuple[Any, ...]) -> bool:
    """Whether an audit event may change something outside the process (see the module docstring)."""
    if event in HARMLESS_EVENTS:
        return False
    if event == "open":
        return _opens_for_writing(args)
    return True


def _opens_for_writing(args: tuple[Any, ...]) -> bool:
    mode = args[1] if len(args) > 1 else None
    flags = args[2] if len(args) > 2 else 0
    if isinstance(mode, str):
        return bool(_WRITING_MODES & set(mode))
    return not isinstance(flags, int) or bool(flags & _WRITING_FLAGS)


Observer = Callable[[str], None]
_local = threading.local()
_installed: list[bool] = []
_install_lock = threading.Lock()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    observer: Observer | None = getattr(_local, "observer", None)
    if observer is None or not is_effect(event, args):
        return
    _local.observer = None  # what the observer does raises events of its own
    try:
        observer(event)
    except Exception:  # an audit hook that raises would fail the program's own operation
        pass
    finally:
        _local.observer = observer


def install() -> None:
    """Install the audit hook (once per process)."""
    with _install_lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed.append(True)


@contextmanager
def observing(observer: Observer | None) -> Iterator[None]:
    """Report this thread's effects to ``observer`` while the block runs (``None``: report nothing)."""
    previous = getattr(_local, "observer", None)
    _local.observer = observer
    try:
        yield
    finally:
        _local.observer = previous


def observer_of_this_thread() -> Observer | None:
    """The observer this thread reports its effects to, if any."""
    observer: Observer | None = getattr(_local, "observer", None)
    return observer
