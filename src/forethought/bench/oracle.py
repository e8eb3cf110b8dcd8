"""The oracle predictor: the true next calls of a recorded trajectory, known at step start for free.

It stands for perfect prediction with zero speculator time (g = 0): whatever a real predictor does, the
oracle arm's time saved is the limit of overlap on the workload, and every arm reports its share of it.
It lives in the bench because it reads the trajectory being replayed; no real predictor may.

The step is found from the conversation itself: the turn is the number of user messages so far, the step
within it the number of assistant messages since the last user message. The trajectory is found from the
request metadata the bench sends with every model call (``metadata.trajectory_id``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from forethought.predictors.base import ObservedCall, Prediction, PredictionContext
from forethought.predictors.trajectory import Trajectory

ORACLE_SOURCE = "oracle"


class OraclePredictor:
    """Predicts exactly the calls the replayed model will make in the current step."""

    name = ORACLE_SOURCE

    def __init__(self, trajectories: Sequence[Trajectory]) -> None:
        self._by_id: dict[str, Trajectory] = {t.id: t for t in trajectories}

    async def predict(self, context: PredictionContext) -> Sequence[Prediction]:
        trajectory = self._trajectory(context.request_extra)
        if trajectory is None:
            return ()
        users = [i for i, m in enumerate(context.messages) if m.get("role") == "user"]
        if not users:
            return ()
        turn = len(users) - 1
        step = sum(1 for m in context.messages[users[-1]:] if m.get("role") == "assistant")
        if turn >= len(trajectory.turns) or step >= len(trajectory.turns[turn].steps):
            return ()  # this step answers in text: nothing to speculate
        return tuple(Prediction(call, 1.0, ORACLE_SOURCE) for call in trajectory.turns[turn].steps[step])

    def observe(self, context: PredictionContext, observed: ObservedCall) -> None:
        """The oracle learns nothing."""

    def _trajectory(self, extra: Mapping[str, object]) -> Trajectory | None:
        metadata = extra.get("metadata")
        if not isinstance(metadata, Mapping):
            return None
        trajectory_id = metadata.get("trajectory_id")
        return self._by_id.get(trajectory_id) if isinstance(trajectory_id, str) else None
