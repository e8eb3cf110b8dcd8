"""Pattern speculation (PASTE-style): mined tool sequences plus argument derivation.

The modules, one idea each: ``flow`` (which tool comes next), ``counts`` (the statistics behind it),
``args`` and ``derive_*`` (where an argument's value comes from: user and system text, earlier arguments,
earlier outputs indexed whole (``derive_outputs``), lists walked item by item, times and dates resolved
against the context's now (``derive_time``), schema rules), ``text`` (the values a text offers), ``turns``
and ``replay`` (recorded sessions walked the way an agent lives them), ``select`` (ranking candidates),
``store`` (persisted statistics) and ``predictor`` (the :class:`PatternPredictor` that ties them together).
"""

from forethought.predictors.patterns.predictor import PatternConfig, PatternPredictor

__all__ = ["PatternConfig", "PatternPredictor"]
