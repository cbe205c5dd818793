"""What a build runs: the frozen job's steps and checkouts, with its build's context.

The build request carries the job as the scheduler froze it
(:class:`~scheduler.config.freeze.FrozenJob`) and what the pipeline adds
per build (:class:`~scheduler.wire.build_spec.BuildContext`); nothing
between freezing and here copies the job into another form. What the two
make together is decided here, where the executor uses it:

* :func:`steps`: a phase's playbooks, each with the commit it runs from. A
  trusted (config-project) step runs from the branch head, never from a
  speculative merge: where the item's merge moved its branch, it names
  the commit the branch had before the changes (``base_state``).
* :func:`checkouts`: the ``override-checkout`` of each required project.
* :func:`check`: what the runner refuses before anything runs (``ERROR``):
  a project the job uses missing from the repo state (the change's
  project, its required projects, the projects holding its steps), a step
  bound to a secret the job does not carry, a timeout that is not a
  positive number of seconds, vars that are not an object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.wire.build_result import Phase
from scheduler.wire.build_spec import BuildSpec, BuildSpecError


@dataclass(frozen=True)
class Step:
    """One executable of a phase: a frozen job's playbook, and the commit it runs from.

    ``path``, ``project``, ``branch``, ``trusted`` and ``secrets`` are the
    playbook's (the project and branch of the job variant that named it).
    ``commit`` is None for a step that runs from the repo state (the commit
    of its branch there); a trusted step whose branch the item's merge
    moved runs from the branch as it was before the speculative changes.
    """

    path: str
    project: str
    branch: str
    commit: str | None = None
    # (name the step sees it under, key in the job's ``secrets``)
    secrets: tuple[tuple[str, str], ...] = ()
    # named by a config project: it runs from a copy no other step can write
    trusted: bool = False

    @property
    def protected(self) -> bool:
        """Whether the step runs from a read-only copy: trusted, or holding a secret."""
        return self.trusted or bool(self.secrets)


def steps(spec: BuildSpec, phase: Phase) -> tuple[Step, ...]:
    """The steps of ``phase``, in the order they run."""
    job, base = spec.job, spec.context.base_state
    playbooks = {Phase.PRE_RUN: job.pre_run, Phase.RUN: job.run, Phase.POST_RUN: job.post_run}
    return tuple(
        Step(
            p.path,
            p.project,
            p.branch,
            base.get(p.project, {}).get(p.branch) if p.trusted else None,
            p.secrets,
            p.trusted,
        )
        for p in playbooks[phase]
    )


def checkouts(spec: BuildSpec) -> Mapping[str, str]:
    """``{project: branch}`` to check out where the job says so (Zuul's override-checkout)."""
    return {r.name: r.override_checkout for r in spec.job.required_projects if r.override_checkout}


def check(spec: BuildSpec) -> None:
    """:class:`BuildSpecError` for a build that cannot run whatever happens (see above)."""
    job, context = spec.job, spec.context
    missing = sorted(set(job.projects_used()) - set(context.repo_state))
    if missing:
        raise BuildSpecError(f"job {job.name}: repo state lacks {', '.join(missing)}")
    for phase in Phase:
        for step in steps(spec, phase):
            unknown = sorted(key for _, key in step.secrets if key not in job.secrets)
            if unknown:
                raise BuildSpecError(f"{phase.value} {step.path}: no secret {unknown[0]!r}")
    for name, value in (("timeout", job.timeout), ("post-timeout", job.post_timeout)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
        ):
            raise BuildSpecError(f"job {job.name}: {name} must be a positive number, got {value!r}")
    if not isinstance(job.vars, Mapping):
        raise BuildSpecError(f"job {job.name}: vars must be an object")
