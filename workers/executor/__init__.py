"""The executor's job runner: run one build of a job, without ZooKeeper or Celery.

:func:`run_build` takes a :class:`BuildSpec` (what to run: the repo state,
the job's phases, vars, limits) and a :class:`BuildControl` (how to learn of
a cancel or a resume, and whom to tell the build started, entered a phase
or paused) and returns a :class:`BuildResult` in Zuul's vocabulary. The
Celery task adapter (``tasks/``) implements :class:`BuildControl` on top of
the build request in ZooKeeper and stores the result; everything here is
plain Python that tests drive directly.

Modules, one job each:

* :mod:`~scheduler.wire.build_spec`: the build spec (the frozen job as
  frozen, and its build's context) and its JSON form;
  :mod:`~workers.executor.job` what the two make together: the steps,
  the checkouts, the checks.
* :mod:`~scheduler.wire.build_result`: result codes, steps, the build result.
* :mod:`~workers.executor.control`: the control hooks (a protocol and two
  implementations).
* :mod:`~workers.executor.workspace`: folders, git checkouts, safe paths;
  :mod:`~workers.executor.treecheckout` writes a checkout's files and
  index in-process (objects: :mod:`~workers.executor.objectstore`, index:
  :mod:`~workers.executor.gitindex`).
* :mod:`~workers.executor.environment`: the job's environment, vars file
  and result data file.
* :mod:`~workers.executor.joblog`: the streamed, stamped ``job-output.txt``.
* :mod:`~workers.executor.process`: one executable with its process tree,
  deadline and cancel; :mod:`~workers.executor.reaper` the subreaper that
  supervises it.
* :mod:`~workers.executor.runner`: the steps of a build, and ``run_build``;
  ``python -m workers.executor SPEC.json`` runs one by hand.

See ``docs/executor.md``.
"""

from __future__ import annotations

from scheduler.model.results import Result
from scheduler.wire.build_result import BuildResult, Phase, StepOutcome, StepRun
from scheduler.wire.build_spec import BuildContext, BuildSpec
from workers.executor.control import BaseControl, BuildControl, LocalControl, StartedInfo
from workers.executor.errors import (
    BuildSpecError,
    ExecutorError,
    RefusedError,
    ResultDataError,
    WorkspaceError,
)
from workers.executor.runner import RunnerOptions, run_build

__all__ = [
    "BaseControl",
    "BuildContext",
    "BuildControl",
    "BuildResult",
    "BuildSpec",
    "BuildSpecError",
    "ExecutorError",
    "LocalControl",
    "Phase",
    "RefusedError",
    "Result",
    "ResultDataError",
    "RunnerOptions",
    "StartedInfo",
    "StepOutcome",
    "StepRun",
    "WorkspaceError",
    "run_build",
]
