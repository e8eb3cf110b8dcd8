"""``python -m forethought.cli``: the command line (as the ``forethought`` script)."""

from forethought.cli import app

app()
