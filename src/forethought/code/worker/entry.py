"""The worker process's entry point: ``zygote FD LIMITS`` (the fork server) or ``worker FD SCRATCH LIMITS``.

The pool starts a fresh interpreter on this module's :func:`main` (through a bootstrap that imports only the
worker's modules); the zygote forks workers that run :func:`~forethought.code.worker.main.serve`.
"""

from __future__ import annotations

import json
import os
import traceback

from forethought.code.worker import zygote
from forethought.code.worker.limits import ShadowLimits
from forethought.code.worker.main import prepare

__all__ = ["main"]


def main(argv: list[str]) -> None:
    """``zygote FD LIMITS`` (the fork server) or ``worker FD SCRATCH LIMITS`` (one worker)."""
    code = 0
    try:
        if argv[0] == "zygote":
            zygote.run(int(argv[1]), ShadowLimits(**json.loads(argv[2])))
        else:
            prepare()
            code = zygote.launch(int(argv[1]), argv[2], ShadowLimits(**json.loads(argv[3])))
    except BaseException:  # stderr is /dev/null in production; a debugging run shows it
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)  # daemon threads may still hold model code: do not wait for them
