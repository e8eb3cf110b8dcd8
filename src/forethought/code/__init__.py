"""Executing model-written code: the OS-isolated shadow worker that speculates it, and the real run that claims.

Public surface: :class:`CodeExecutor` (the real run through a session: claims speculations, runs
independent calls concurrently, keeps plain execution's observable behaviour), :class:`PlainExecutor` (the
serial baseline), :class:`ExecResult` / :class:`CallRecord` (what a run produced), :class:`ShadowLimits`
(the shadow worker's limits), :class:`RealLink` (how a real run and a turn's shadow coordinate) and
:func:`code_policy` (a policy whose caps do not serialise a code action's calls). The shadow itself is driven
by :class:`forethought.code.predictor.CodePredictor`.
"""

from forethought.code.defaults import CODE_CAPS, code_policy
from forethought.code.executor import CodeExecutor
from forethought.code.link import NullLink, RealLink
from forethought.code.plain import PlainExecutor
from forethought.code.predictor import CodePredictor
from forethought.code.results import CallRecord, ExecResult
from forethought.code.worker.limits import ShadowLimits

__all__ = ["CODE_CAPS", "CallRecord", "CodeExecutor", "CodePredictor", "ExecResult", "NullLink", "PlainExecutor",
           "RealLink", "ShadowLimits", "code_policy"]
