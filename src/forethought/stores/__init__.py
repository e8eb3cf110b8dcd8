"""Shared backends: learned patterns and speculative results that several workers (and machines) share.

* :mod:`~forethought.stores.redis_patterns`: the PatternStore protocol on Redis (additive, idempotent merges);
* :mod:`~forethought.stores.fallback`: keep learning locally while the shared store is away;
* :mod:`~forethought.stores.results`: the SharedResults protocol, its Redis backend and an in-memory fake;
* :mod:`~forethought.stores.shared_tools`: how a session's speculation of a ``shared`` tool uses them.

Redis errors never leave this package (:mod:`~forethought.stores.errors`). See ``docs/scale.md``.
"""
