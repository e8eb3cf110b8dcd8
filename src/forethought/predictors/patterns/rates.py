"""A learned per-tool rate: successes over trials, shrunk towards the rate over all tools.

Several pattern rules ask "how often does this tool's call do X" (repeat an earlier call, pass one value
to two parameters). :class:`ToolRate` counts trials and successes per tool and for all tools together in
the predictor's shared :class:`~forethought.predictors.patterns.counts.Counts` (keys ``prefix SEP tool SEP
s|n``, ``*`` for all tools), and answers with the tool's rate shrunk towards the all-tools rate, itself
shrunk towards an uninformed prior, so a rule a workload never exercises fades and one it does keeps.
"""

from __future__ import annotations

from forethought.predictors.patterns.counts import Counts

__all__ = ["ANY", "SEP", "ToolRate"]

SEP = "\x1f"
ANY = "*"


class ToolRate:
    """Successes over trials of one rule, per tool and over all tools."""

    def __init__(self, counts: Counts, prefix: str, prior_rate: float = 0.5, prior_weight: float = 2.0) -> None:
        self.counts = counts
        self.prefix = prefix
        self.prior_rate = prior_rate
        self.prior_weight = prior_weight

    def keys(self, tool: str) -> tuple[str, str]:
        """The counter keys of ``tool``'s successes and trials."""
        base = SEP.join((self.prefix, tool, ""))
        return base + "s", base + "n"

    def count(self, tool: str, success: bool) -> None:
        """One trial of ``tool`` (counted for all tools too), a success or not."""
        for level in (tool, ANY):
            s_key, n_key = self.keys(level)
            self.counts.add(n_key)
            if success:
                self.counts.add(s_key)

    def rate(self, tool: str) -> float:
        """The tool's rate, shrunk towards the all-tools rate, shrunk towards the prior."""
        rate = self.prior_rate
        for level in (ANY, tool):
            s_key, n_key = self.keys(level)
            rate = (self.counts.get(s_key) + self.prior_weight * rate) / (self.counts.get(n_key) + self.prior_weight)
        return rate
