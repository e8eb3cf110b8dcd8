"""The agent loop and its helpers: serial and speculative through one code path, a flag apart.

* :mod:`.loop` — :class:`~forethought.agent.loop.Agent`: steps, early dispatch, tool results in the model's order;
* :mod:`.results` — what a run reports; :mod:`.stream` — its text as an async iterator;
* :mod:`.feed` — the step's guesses into the session (priced, thinned, chained);
* :mod:`.narrowing` — guesses narrowed by the streamed call; :mod:`.deferral` — cheap guesses held for samples;
* :mod:`.pacing` — returning requests admitted by the server's time to first token;
* :mod:`.engine_side` — reading a response the gateway may serve, and what is posted to it.

Users import :class:`Agent` from :mod:`forethought`.
"""
