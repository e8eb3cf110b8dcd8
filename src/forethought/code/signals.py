"""Control-flow signals of the shadow: why a shadow statement stopped, raised through the shadow's code.

They derive from ``BaseException`` so that model-written ``except Exception:`` does not swallow them (a bare
``except:`` can; the worker's watchdog then ends the worker, see :mod:`forethought.code.shadow`). They
never leave the worker: the runner turns each into a decision about the statement that raised it.
"""

from __future__ import annotations


class ShadowSignal(BaseException):
    """Base of every shadow control-flow signal."""


class ShadowBlocked(ShadowSignal):
    """The statement needs something the shadow may not know (a value that did not arrive as data, a non-data
    tool argument, a call the parent did not speculate). Only statements depending on it are skipped."""


class ShadowBudgetExceeded(ShadowBlocked):
    """The statement's Python code ran past its CPU budget (the watchdog's interruption)."""


class ShadowToolFailed(ShadowSignal):
    """A speculated tool call the statement depends on raised: the real run raises there too."""


class ShadowStopped(ShadowSignal):
    """The turn ended (or the shadow was closed) while the statement ran."""
