"""vLLM's CPU build with a locally built tiny model: install, serve, replay BFCL, the tool-cache plugin.

* :mod:`.install` — the post-install step of ``make vllm-venv`` (the ``vllm`` metadata shim);
* :mod:`.tiny_model` — the deterministic tokenizer + random-weight model, built from a seed and text;
* :mod:`.server` — ``vllm serve`` on 127.0.0.1 on a free port, health wait, stop by PID;
* :mod:`.replay` — pinning each request to a trajectory's recorded next call, and checking it;
* :mod:`.metrics` — vLLM's own Prometheus counters (prompt, prefix-cache and generated tokens);
* :mod:`.plugin` — the ``vllm.endpoint_plugins`` entry serving ``POST /cache-tool-output/{response_id}``.
"""
