"""The self-contained core: one key rule, one write clock, one policy resolution, one speculation lifecycle.

Every way in (the Agent, the tap, the framework adapters, the MCP proxy, the gateway, code mode, the daemon)
translates its protocol into calls on :class:`~forethought._core.session.Session` and back; none keeps its
own key, clock, policy lookup or notion of a speculation's state. Nothing here imports anything outside
``_core`` but :mod:`forethought.errors` and :mod:`forethought.telemetry` (an import-linter contract).
"""
