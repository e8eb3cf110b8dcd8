"""A derivation rule as a value: source, locator, transform and list wrap, with the stable key it is stored by.

The grammar of sources and locators is described in :mod:`derive_rules`, which replays rules
(:class:`~forethought.predictors.patterns.derive_rules.Sources`); here only the value, its text form
(:attr:`Rule.key`, parsed back by :meth:`Rule.from_key`) and what the argument model asks of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from forethought.predictors.patterns.derive_time import WHEN

SOURCES = frozenset({"user", "prev", "sys", "all", "arg", "out", "tok", "ord", "walk"})
"""What a rule may read (:mod:`derive_rules` describes each)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One way to obtain an argument value: a source, a locator inside it, a transform, maybe a list wrap."""

    source: str
    locator: tuple[str, ...]
    transform: str
    wrap: bool = False
    key: str = field(init=False, repr=False, compare=False)
    """A stable text form, used to store the rule's statistics (computed once)."""
    message_only: bool = field(init=False, repr=False, compare=False)
    """Whether the value depends on a user message alone (not on the calls made so far)."""

    def __post_init__(self) -> None:
        key = json.dumps([self.source, list(self.locator), self.transform, self.wrap], separators=(",", ":"))
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "message_only",
                           self.source in ("user", "prev", "sys", "all") and self.locator[1:2] != ("u",)
                           and self.locator[:1] != (WHEN,))

    @classmethod
    def from_key(cls, key: str) -> Rule:
        """The rule stored by ``key``; ``ValueError`` (or ``TypeError``) when ``key`` is not the key of a rule
        as this module writes it (a store may hold another program's keys, or damaged ones)."""
        source, locator, transform, wrap = json.loads(key)
        if not (isinstance(source, str) and source in SOURCES and isinstance(locator, list) and locator
                and all(isinstance(x, str) for x in locator) and isinstance(transform, str)
                and isinstance(wrap, bool)):
            raise ValueError("not a rule's key")
        rule = cls(source, tuple(locator), transform, wrap)
        if rule.key != key:
            raise ValueError("not a rule's key")
        return rule

    @property
    def reads_outputs(self) -> bool:
        """Whether the value is read from earlier outputs (their indexes: :mod:`derive_outputs`)."""
        return self.source in ("out", "ord", "tok", "walk")

    @property
    def generic(self) -> bool:
        """Whether the rule names no tool, so its record carries over to tools never seen."""
        return not (self.source in ("out", "tok", "arg", "ord") and self.locator[:1] == ("tool",))
