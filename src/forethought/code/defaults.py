"""Code mode's policy: the project's defaults with caps sized so a code action's calls are not serialised.

A code action often makes tens of independent calls at once (a loop over a list, a comprehension) and long
programs make more than a chat turn's handful. Under caps sized for one tool call per step, the ninth of ten
independent calls waits a whole tool time behind the first eight, and the seventeenth call of a long program
is never speculated. :func:`code_policy` raises the speculative concurrency (global and per session) and the
per-turn budgets to at least :data:`CODE_CAPS`, keeping every other setting of the policy it is given.
Code mode's own runtimes use it (:class:`~forethought.code.harness.PythonTool`, the code benchmark); a user
who builds the runtime passes ``code_policy(their_policy)`` to get the same.
"""

from __future__ import annotations

from dataclasses import replace

from forethought._core.policy import Policy

CODE_CAPS = {"max_concurrent": 64, "max_concurrent_per_session": 32, "max_calls_per_turn": 256,
             "max_cost_per_turn": 256.0}
"""Lower bounds of the caps in code mode: 32 calls of one action in flight at once (the widest fan-out of the
benchmark and of the held-out suite was 12), 256 calls speculated per turn."""


def code_policy(base: Policy | None = None) -> Policy:
    """``base`` (or the default policy) with its caps raised to at least :data:`CODE_CAPS`."""
    policy = base if base is not None else Policy()
    return replace(policy, **{name: max(getattr(policy, name), value) for name, value in CODE_CAPS.items()})
