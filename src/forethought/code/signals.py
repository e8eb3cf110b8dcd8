"""Control-flow signals of the shadow: why a shadow statement stopped, raised through the shadow's code.

They derive from ``BaseException`` so that model-written ``except Exception:`` never swallows them (and the
instrumented ``except`` handlers re-raise them even from a bare ``except:``). They never leave the shadow:
the runner turns each into a decision about the statement that raised it.
"""

from __future__ import annotations


class ShadowSignal(BaseException):
    """Base of every shadow control-flow signal."""


class ShadowBlocked(ShadowSignal):
    """The statement needs something the shadow may not do or know (an unsafe import, a blocked builtin, a
    value that could not be copied, a non-JSON tool argument). Only statements depending on it are skipped."""


class ShadowBudgetExceeded(ShadowBlocked):
    """The statement ran past its step, time, size or depth budget."""


class ShadowToolFailed(ShadowSignal):
    """A speculated tool call the statement depends on raised: the real run raises there too."""


class ShadowStopped(ShadowSignal):
    """The turn ended (or the shadow was closed) while the statement ran."""
