"""Predictors: where guesses come from (mined patterns, a speculator model), behind one protocol.

:mod:`~forethought.predictors.base` defines the seam (:class:`Predictor`, :class:`Prediction`, the context
a predictor sees); :mod:`~forethought.predictors.model` samples a speculator LLM; :mod:`.patterns` mines
recurring tool sequences and derives arguments. Predictors never execute tools and never import workloads.
"""

from forethought.predictors.base import (
    ObservedCall,
    Prediction,
    PredictionContext,
    Predictor,
    SampleVotes,
    SamplingPredictor,
    StreamingPredictor,
)
from forethought.predictors.model import ModelSpeculator

__all__ = ["ModelSpeculator", "ObservedCall", "Prediction", "PredictionContext", "Predictor", "SampleVotes",
           "SamplingPredictor", "StreamingPredictor"]
