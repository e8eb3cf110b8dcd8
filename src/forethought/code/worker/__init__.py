"""The shadow's OS-isolated worker process: isolation layers, the process entry, the pool, the parent's client.

Only :mod:`.limits`, :mod:`.namespaces`, :mod:`.sandbox`, :mod:`.hooks`, :mod:`.zygote` and :mod:`.main` are
imported inside the worker; the parent side is :mod:`.pool` (pre-started processes) and :mod:`.client` (one
turn's channel to the session).
"""
