"""vLLM's CPU build in the benchmark: install, a locally built tiny model, the server, BFCL replay, counters.

* :mod:`.install` — the post-install step of ``make vllm-venv`` (the ``vllm`` metadata shim, the plugin entry);
* :mod:`.tiny_model` — the deterministic tokenizer + random-weight model, built from a seed and text;
* :mod:`.server` — ``vllm serve`` on 127.0.0.1 on a free port, health wait, stop by PID;
* :mod:`.forced` — the logits processor that pins a request to given tokens;
* :mod:`.pin` and :mod:`.replay` — pinning each request to a trajectory's recorded next call, and checking it;
* :mod:`.metrics` — vLLM's own Prometheus counters (prompt, prefix-cache and generated tokens);
* :mod:`.bench` and :mod:`.session_probe` — ``forethought bench --engine vllm`` and the session probe.
"""
