"""Shared backends: learned patterns and speculative results that several workers (and machines) share.

* :mod:`~forethought.stores.redis_patterns`: the PatternStore protocol on Redis (additive, idempotent merges);
* :mod:`~forethought.stores.fallback`: keep learning locally while the shared store is away;
* :mod:`~forethought.stores.memory`: the in-memory fake of the shared pattern store (outages, lost replies);
* :mod:`~forethought.stores.results`: the SharedResults protocol, its Redis backend and an in-memory fake;
* :mod:`~forethought.stores.sealing`: which values may be shared; canonical JSON, HMAC seals, key digests;
* :mod:`~forethought.stores.shared_tools`: how a session's speculation of a ``shared`` tool uses them;
* :mod:`~forethought.stores.gateway_scopes`: the gateway's response scopes in Redis (replicas);
* :mod:`~forethought.stores.server`: a local ``redis-server`` (tests and the bench).

Redis errors never leave this package (:mod:`~forethought.stores.errors`). See ``docs/scale.md``.
"""
