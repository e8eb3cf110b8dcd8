"""forethought inside a real vLLM server: what a user deploys beside vLLM.

* :mod:`.plugin` — the ``vllm.endpoint_plugins`` entry serving ``POST /cache-tool-output/{response_id}`` and
  the relaying chat endpoints on vLLM's own app;
* :mod:`.chat` — the plugin's own chat endpoint, continuing a response inside vLLM's engine on a cache hit;
* :mod:`.session` — a streaming-input request whose KV cache survives between turns.

The harness that builds a tiny local model, starts vLLM and replays BFCL through it lives in
:mod:`forethought.bench.vllm` (measurement only).
"""
