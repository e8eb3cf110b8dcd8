"""The simulated engine: an OpenAI-compatible model server that replays trajectories with a timing model.

* :mod:`.model_server` — ``forethought serve-model``: the HTTP server (streaming chat completions);
* :mod:`.engine` — the timing model (TTFT, prefill per uncached token, batch-dependent decode);
* :mod:`.slots` — batch slots with continuations first; :mod:`.cache` — the per-conversation prefix cache;
* :mod:`.wrong_calls` — plausible wrong calls for the speculator stand-in.

Measurement only: nothing outside :mod:`forethought.bench` imports it.
"""
