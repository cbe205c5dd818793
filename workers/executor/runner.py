"""The job runner: :func:`run_build` turns a :class:`BuildSpec` into a :class:`BuildResult`.

A build goes through named steps, each a method of :class:`BuildRun`:

1. ``prepare_workspace``: folders, the job log, a checkout of every project
   at the commits of the repo state, the vars and result files, and every
   phase's executable resolved (and refused if it must be: ``ERROR``). A
   workspace that cannot be prepared gives ``RETRY``.
2. ``run_phases``: pre-run, run and post-run in order, with Zuul's rules
   (see :mod:`scheduler.wire.build_result`), the job's ``timeout`` over pre-run
   and run, ``post_timeout`` for each post-run executable, a pause after
   run when the job asks for one, and cancel checked throughout.
   A step ending in ``.yaml``/``.yml`` is a playbook, run with
   ``ansible-playbook`` against the build's nodes
   (:mod:`workers.executor.playbooks`); ansible-playbook's "host
   unreachable" exit makes the build ``RETRY`` whatever the phase.
3. ``collect_result``: read and validate the result data, write the final
   line of the log, and build the result.
4. ``clean_up``: remove the workspace unless a hold was requested (the logs
   stay), close the log.

``run_build`` never raises for anything a job or its repositories can
cause; it is a process boundary, so even a bug in the runner becomes a
``RETRY`` result with the traceback in the worker's log.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scheduler.errors import SettingsError
from scheduler.model.results import Result
from scheduler.settings.sections import ConnectionSettings, SandboxLimits, Settings
from scheduler.wire.build_result import PHASES, BuildResult, Phase, StepOutcome, StepRun
from scheduler.wire.build_spec import BuildSpec, BuildSpecError
from workers.executor.control import BuildControl, StartedInfo
from workers.executor.environment import (
    DEFAULT_PASS_ENV,
    DEFAULT_RESULT_DATA_LIMIT,
    job_environment,
    read_result_data,
    write_job_files,
    zuul_flag,
)
from workers.executor.errors import (
    BuildCancelledError,
    RefusedError,
    ResultDataError,
    WorkspaceError,
)
from workers.executor.failureoutput import FailureOutput
from workers.executor.job import Step, check, steps
from workers.executor.joblog import JobLog, LineSplitter
from workers.executor.playbooks import AnsibleSetup, is_playbook
from workers.executor.process import StepLimits, cancel_requested, run_step
from workers.executor.recycle import remove_tree
from workers.executor.sandbox import (
    BuildNamespaces,
    Sandbox,
    build_namespaces,
    give,
    host_uid,
    prepare,
    require_user_namespaces,
)
from workers.executor.secrets import (
    Redactor,
    decrypted_strings,
    step_secrets,
    write_step_secrets,
)
from workers.executor.workspace import (
    BuildLayout,
    StepLocator,
    checkout_projects,
    create_folders,
    put_workspace_aside,
    remove_workspace,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunnerOptions:
    """How the runner behaves on this worker (not per job)."""

    state_dir: Path
    # Seconds between two polls of the cancel hook while a step runs.
    poll_interval: float = 0.2
    # Seconds between SIGTERM and SIGKILL when a step's tree is stopped.
    kill_grace: float = 1.0
    # Lines of the log's end kept in the result.
    tail_lines: int = 50
    result_data_limit: int = DEFAULT_RESULT_DATA_LIMIT
    # Names of the worker's environment passed on to jobs.
    pass_env: tuple[str, ...] = DEFAULT_PASS_ENV
    # Borrow a local source's objects (fast) rather than fetch them (independent).
    share_objects: bool = True
    # Characters of job output kept in job-output.txt (None: no limit).
    log_limit: int | None = 256 * 1024 * 1024
    # "bwrap": every executable runs in bubblewrap (workers/executor/sandbox.py)
    sandbox: str = "none"
    # which steps share the host's network: "loopback" (none), "nodes"
    # (the steps of a build with nodes) or "host" (every step)
    sandbox_network: str = "loopback"
    # processes, memory, file size and open files of a sandboxed step
    sandbox_limits: SandboxLimits = field(default_factory=SandboxLimits)
    # host folders a sandboxed job may write besides its own build
    sandbox_writable: tuple[Path, ...] = ()
    # files and folders a sandboxed job must not read (sluice.yaml, keys)
    hidden: tuple[Path, ...] = ()
    # decrypts the project keys that decrypt secrets ("" = this worker cannot)
    keystore_password: str = field(default="", repr=False)
    # merge the item's changes again here even when the merger's cache has them
    merge_here: bool = False
    # the node key playbooks log in with (through a per-build ssh-agent)
    node_key: Path | None = None
    # where workspaces live (None: <state_dir>/builds; executor.build_dir)
    build_dir: Path | None = None
    # a finished workspace is kept as its process's spare and pruned for the
    # next build rather than deleted (workers/executor/recycle.py)
    recycle_workspaces: bool = True
    # where projects are fetched from when this executor merges an item's
    # changes again (workers/executor/speculation.py)
    connections: Mapping[str, ConnectionSettings] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.poll_interval <= 0 or self.kill_grace < 0:
            raise SettingsError("executor: poll_interval must be > 0 and kill_grace >= 0")
        if self.poll_interval + self.kill_grace >= 2.0:
            # A cancel must stop a build within 2 s (issue 6).
            raise SettingsError("executor: poll_interval + kill_grace must stay below 2 s")

    @classmethod
    def from_settings(cls, settings: Settings) -> RunnerOptions:
        return cls(state_dir=settings.state_dir)


@dataclass(frozen=True)
class Outcome:
    """The result so far and why; ``allow_post_result`` is Zuul's rule of precedence."""

    code: Result
    message: str
    allow_post_result: bool = True


@dataclass(frozen=True)
class _PhaseEnd:
    """How a phase ended: its first failing step (or None) and that step's outcome."""

    outcome: StepOutcome = StepOutcome.OK
    step: StepRun | None = None


@dataclass
class BuildRun:
    """One build on its way through the steps; see the module docstring."""

    spec: BuildSpec
    control: BuildControl
    options: RunnerOptions
    # the spec's secrets decrypted (workers/executor/secrets.py), by key
    secrets: Mapping[str, Any] = field(default_factory=dict)
    layout: BuildLayout = field(init=False)
    started_at: float = field(init=False, default_factory=time.time)
    steps: list[StepRun] = field(init=False, default_factory=list)
    # The resolved executable of each step: (phase, index) -> real path.
    executables: dict[tuple[Phase, int], Path] = field(init=False, default_factory=dict)
    job_log: JobLog | None = field(init=False, default=None)
    # inventory, vars and ssh-agent of a build with playbooks (playbooks.py)
    ansible: AnsibleSetup | None = field(init=False, default=None)
    # the first playbook step that found a host unreachable: the build is retried
    unreachable: StepRun | None = field(init=False, default=None)
    # what every step of a sandboxed build sees (None: no sandbox)
    sandbox: Sandbox | None = field(init=False, default=None)
    # the namespaces its untrusted steps share, made at the first (None: not made)
    namespaces: BuildNamespaces | None = field(init=False, default=None)
    # the job's failure-output, searched in the run steps' lines (None: it has none)
    failure_output: FailureOutput | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.layout = BuildLayout.for_build(
            self.options.state_dir, self.spec.context.build_uuid, self.options.build_dir
        )
        self.redact = Redactor(decrypted_strings(self.spec, self.secrets))
        if self.spec.job.failure_output:
            self.failure_output = FailureOutput(self.spec.job.failure_output, self._pre_failed)

    # -- the steps ---------------------------------------------------------

    def execute(self) -> BuildResult:
        """Run every step; always returns a result, always cleans up."""
        try:
            outcome = self._guarded(self._prepare_and_run)
            data, outcome = self._guarded_collect(outcome)
            held = self.clean_up(outcome.code)
        finally:
            if self.namespaces is not None:
                self.namespaces.close()
            if self.ansible is not None:
                self.ansible.close()
            if self.job_log is not None:
                self.job_log.close()
        return self._result(outcome, data, held)

    def prepare_workspace(self) -> None:
        """Folders, log, checkouts, job files, executables resolved; then ``on_started``."""
        began = time.monotonic()
        spec, job, context = self.spec, self.spec.job, self.spec.context
        recycle_for = context.repo_state if self.options.recycle_workspaces else None
        recycled = create_folders(self.layout, recycle_for)
        self.job_log = JobLog(
            self.layout.log_file,
            self.options.tail_lines,
            limit=self.options.log_limit,
            redact=self.redact if self.redact.pieces else None,
        )
        self._mark(
            f"Sluice build {context.build_uuid}: job {job.name} of {job.project} "
            f"({job.branch}, {context.ref or 'no ref'}) in {context.tenant}/{job.pipeline}"
        )
        share = self.options.share_objects
        chosen = checkout_projects(
            spec, self.layout, share=share, cancelled=self._cancel_requested, recycled=recycled
        )
        write_job_files(spec, self.layout)
        self._resolve_executables(StepLocator(spec, self.layout, chosen, share=share))
        uid = self._prepare_sandbox()
        if any(is_playbook(s.path) for phase in PHASES for s in steps(spec, phase)):
            self.ansible = AnsibleSetup.prepare(
                spec,
                self.layout,
                chosen,
                self.options.node_key,
                result_data_limit=self.options.result_data_limit,
                uid=uid,
            )
        if self.sandbox is not None:
            self.sandbox = self._trusted_kept(self.sandbox)
        self._mark(f"Workspace {self.layout.root} ready in {time.monotonic() - began:.2f}s")
        info = StartedInfo(
            build_uuid=context.build_uuid,
            workspace=str(self.layout.root),
            project_dir=str(self.project_dir),
            log_path=str(self.layout.log_file),
            started_at=self.started_at,
        )
        _call_hook("on_started", self.control.on_started, info)

    def run_phases(self) -> Outcome:
        """Pre-run, run, (pause,) post-run, with Zuul's result rules."""
        timeout = self.spec.job.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        outcome = self._run_main_phases(lambda: deadline)
        if outcome.code is Result.ABORTED:
            return outcome
        outcome = self._pause_or_veto(outcome)
        if outcome.code is Result.ABORTED:
            return outcome
        success = outcome.code is Result.SUCCESS
        post = self.run_phase(Phase.POST_RUN, self._post_deadline, success=success, keep_going=True)
        if post.outcome is StepOutcome.ABORTED:
            return self._aborted(post)
        if self.unreachable is not None:  # Zuul retries a build that lost a node
            message = f"{_describe(self.unreachable)}: a host was unreachable"
            return Outcome(Result.RETRY, message, allow_post_result=False)
        if post.step is not None and outcome.allow_post_result:
            return Outcome(Result.POST_FAILURE, _describe(post.step))
        return outcome

    def _prepare_sandbox(self) -> int | None:
        """The build's sandbox, its folders handed to the job; the job's host uid."""
        if self.options.sandbox != "bwrap":
            return None
        require_user_namespaces()
        uid = host_uid(self.spec.context.build_uuid)
        sources = [Path(s) for s in self.spec.context.sources.values() if "://" not in s]
        self.sandbox = Sandbox(
            self.layout,
            uid,
            self.options.state_dir,
            readable=tuple(s for s in sources if s.is_absolute()),
            writable=self.options.sandbox_writable,
            hidden=self.options.hidden,
            limits=self.options.sandbox_limits,
        )
        prepare(self.sandbox)
        return uid

    def _trusted_kept(self, sandbox: Sandbox) -> Sandbox:
        """``sandbox`` with the build's Ansible sockets writable, trusted files kept."""
        read_only = list(sandbox.read_only)
        writable = sandbox.writable
        if self.ansible is not None:
            read_only += self.ansible.read_only
            writable = (*writable, self.ansible.sockets)
        content = self.layout.root / "content"
        if content.is_dir():
            read_only.append(content)
        return replace(sandbox, read_only=tuple(read_only), writable=writable)

    def _sandbox(self, job_step: Step, own: Path | None) -> list[str]:
        """The sandbox prefix of one step (``own``: a trusted step's own folder)."""
        if self.sandbox is None:
            return []
        playbook = self.ansible is not None and is_playbook(job_step.path)
        return self.sandbox.prefix(network=self._host_network, own=own, playbook=playbook)

    @property
    def _host_network(self) -> bool:
        """Whether the build's steps share the host's network (``executor.sandbox_network``)."""
        return self.options.sandbox_network == "host" or (
            self.options.sandbox_network == "nodes" and bool(self.spec.context.nodes)
        )

    def _namespaces(self, job_step: Step) -> tuple[int, ...]:
        """The build's namespaces for an untrusted sandboxed step (made at the first); () else.

        A protected step (trusted, or holding a secret) gets namespaces of
        its own: nothing an untrusted step of the build could have left in
        its loopback or its user's keyrings reaches it.
        """
        if self.sandbox is None or job_step.protected:
            return ()
        if self.namespaces is None:
            made = build_namespaces(self.sandbox.uid, host_network=self._host_network)
            self.namespaces = made or BuildNamespaces(())  # none: each step makes its own
        return self.namespaces.fds

    def run_phase(
        self,
        phase: Phase,
        deadline: Callable[[], float | None],
        *,
        success: bool = True,
        keep_going: bool = False,
    ) -> _PhaseEnd:
        """Run a phase's executables in order; stop at the first failure unless ``keep_going``."""
        phase_steps = steps(self.spec, phase)
        end = _PhaseEnd()
        if not phase_steps:
            return end
        _call_hook("on_phase", self.control.on_phase, phase)
        env = job_environment(
            self.spec, self.layout, phase, success=success, pass_env=self.options.pass_env
        )
        for index, job_step in enumerate(phase_steps):
            step = self.run_one(phase, index, job_step, env, deadline())
            if step.outcome is StepOutcome.ABORTED:
                return _PhaseEnd(step.outcome, step)
            if step.outcome is not StepOutcome.OK and end.step is None:
                end = _PhaseEnd(step.outcome, step)
            if end.step is not None and not keep_going:
                break
        return end

    def run_one(
        self,
        phase: Phase,
        index: int,
        job_step: Step,
        env: dict[str, str],
        deadline: float | None,
    ) -> StepRun:
        """One executable: markers around it in the log, its record in ``steps``."""
        label, path = phase.value.upper(), job_step.path
        started, began = time.time(), time.monotonic()
        exit_: int | None = None
        if cancel_requested(self.control.cancel_requested):
            outcome = StepOutcome.ABORTED
        elif deadline is not None and began >= deadline:
            outcome = StepOutcome.TIMED_OUT  # earlier steps used up the time
        else:
            self._mark(f"{label} START: {path}")
            limits = StepLimits(
                deadline=deadline,
                cancel_requested=self.control.cancel_requested,
                poll_interval=self.options.poll_interval,
                kill_grace=self.options.kill_grace,
            )
            assert self.job_log is not None
            name = f"{phase.value}-{index}"  # of the step's secrets file and own folder
            secrets_file = self._secrets_file(name, job_step)
            if secrets_file is not None:
                env = {**env, "SLUICE_SECRETS_FILE": str(secrets_file)}
            own = self._fresh_home(name) if job_step.protected else None
            if own is not None:
                env = {**env, "HOME": str(own / "home"), "TMPDIR": str(own / "tmp")}
            try:
                executable, args, env = self._command(
                    job_step, self.executables[(phase, index)], env
                )
                ended = run_step(
                    executable,
                    cwd=self.project_dir,
                    env=env,
                    output=LineSplitter(self.job_log, phase.value, self._watch(phase)),
                    limits=limits,
                    prefix=self._sandbox(job_step, own),
                    args=args,
                    namespaces=self._namespaces(job_step),
                )
            finally:
                if secrets_file is not None:
                    secrets_file.unlink(missing_ok=True)
                if own is not None:
                    remove_tree(own)
            exit_, outcome = ended.exit_code, ended.outcome
        project = job_step.project
        duration = time.monotonic() - began
        step = StepRun(phase, path, outcome, exit_, started, duration, project=project)
        self.steps.append(step)
        if self.ansible is not None and is_playbook(path) and self.ansible.host_unreachable(exit_):
            self.unreachable = self.unreachable or step
        self._mark(f"{label} END: {_describe(step)} ({step.duration:.2f}s)")
        return step

    def _command(
        self, job_step: Step, target: Path, env: dict[str, str]
    ) -> tuple[Path, list[str], dict[str, str]]:
        """What runs: an executable as is, a playbook through ``ansible-playbook``."""
        if self.ansible is None or not is_playbook(job_step.path):
            return target, [], env
        (executable, *args), env = self.ansible.step(target, env)
        return Path(executable), args, env

    def _secrets_file(self, label: str, job_step: Step) -> Path | None:
        """The step's ``SLUICE_SECRETS_FILE`` if a secret is bound to it."""
        seen = step_secrets(job_step, self.secrets)
        if not seen:
            return None
        # a sandbox made the folder passable to the job's user (sandbox.prepare)
        path = write_step_secrets(self.layout.root / "secrets", label, seen)
        give(path, self._job_uid)
        return path

    def _fresh_home(self, label: str) -> Path:
        """A trusted or secret-holding step's own folder, with its ``home`` and ``tmp``.

        Earlier steps could write the build's ``home/`` (a ``.gitconfig``
        whose hooks would run with this step's secrets); this one starts
        clean, in a folder they could not prepare, removed when it ends.
        """
        folder = self.layout.root / "step" / label
        if os.path.lexists(folder):
            remove_tree(folder)
        folder.mkdir(parents=True)
        folder.chmod(0o711)  # passable to the job's user whatever the umask
        for name in ("home", "tmp"):
            (folder / name).mkdir()
            give(folder / name, self._job_uid)
        return folder

    @property
    def _job_uid(self) -> int | None:
        return None if self.sandbox is None else self.sandbox.uid

    def collect_result(self, outcome: Outcome) -> tuple[dict[str, Any], Outcome]:
        """The job's result data, validated; invalid data turns SUCCESS into FAILURE."""
        data: dict[str, Any] = {}
        if self.job_log is not None and self.layout.result_file.parent.is_dir():
            try:
                data = read_result_data(self.layout, self.options.result_data_limit)
            except ResultDataError as exc:
                code = Result.FAILURE if outcome.code is Result.SUCCESS else outcome.code
                outcome = Outcome(code, _join(outcome.message, str(exc)))
            if self.redact.pieces:
                data = _redacted(data, self.redact)
        detail = f": {outcome.message}" if outcome.message else ""
        self._mark(f"RESULT {outcome.code.value}{detail}")
        return data, outcome

    def clean_up(self, result: Result) -> str | None:
        """Remove the workspace unless held; where it is when held.

        A held build (an autohold) keeps its workspace only when it did not
        succeed and was not cancelled: that is the build someone wants to see.
        """
        if self.spec.context.hold and result not in (Result.SUCCESS, Result.ABORTED):
            self._mark(f"Workspace held at {self.layout.root}")
            return str(self.layout.root)
        try:
            if self.options.recycle_workspaces:
                scrub_for = self.spec.context.repo_state if self.sandbox is not None else None
                put_workspace_aside(self.layout, scrub_for)
            else:
                remove_workspace(self.layout)
        except OSError:
            log.exception("build %s: cannot remove the workspace", self.spec.context.build_uuid)
        return None

    # -- helpers -----------------------------------------------------------

    @property
    def project_dir(self) -> Path:
        return self.layout.project_dir(self.spec.job.project)

    def _cancel_requested(self) -> bool:
        return cancel_requested(self.control.cancel_requested)

    def _prepare_and_run(self) -> Outcome:
        if self._cancel_requested():
            return Outcome(Result.ABORTED, "cancelled before the build started")
        try:
            check(self.spec)
        except BuildSpecError as exc:
            return Outcome(Result.ERROR, str(exc))
        self.prepare_workspace()
        return self.run_phases()

    def _guarded(self, work: Callable[[], Outcome]) -> Outcome:
        """Map the executor's errors to results; a bug becomes RETRY (logged)."""
        try:
            return work()
        except RefusedError as exc:
            return Outcome(Result.ERROR, str(exc))
        except BuildCancelledError as exc:
            return Outcome(Result.ABORTED, str(exc))
        except WorkspaceError as exc:
            return Outcome(Result.RETRY, f"workspace: {exc}")
        except Exception as exc:  # the process boundary of a build
            log.exception("build %s: runner failed", self.spec.context.build_uuid)
            return Outcome(Result.RETRY, f"executor error: {type(exc).__name__}: {exc}")

    def _guarded_collect(self, outcome: Outcome) -> tuple[dict[str, Any], Outcome]:
        try:
            return self.collect_result(outcome)
        except Exception as exc:  # the process boundary of a build
            log.exception("build %s: collecting the result failed", self.spec.context.build_uuid)
            return {}, Outcome(Result.RETRY, f"executor error: {type(exc).__name__}: {exc}")

    def _run_main_phases(self, deadline: Callable[[], float | None]) -> Outcome:
        pre = self.run_phase(Phase.PRE_RUN, deadline)
        if pre.outcome is StepOutcome.ABORTED:
            return self._aborted(pre)
        if pre.step is not None:
            code = Result.TIMED_OUT if pre.outcome is StepOutcome.TIMED_OUT else Result.RETRY
            return Outcome(code, _describe(pre.step), allow_post_result=False)
        run = self.run_phase(Phase.RUN, deadline)
        if run.outcome is StepOutcome.ABORTED:
            return self._aborted(run)
        if run.outcome is StepOutcome.TIMED_OUT:
            assert run.step is not None
            return Outcome(Result.TIMED_OUT, _describe(run.step), allow_post_result=False)
        return self._run_outcome(run)

    def _run_outcome(self, run: _PhaseEnd) -> Outcome:
        """A run phase that was not cancelled nor timed out; a pre-fail makes it a FAILURE.

        Zuul: a build whose output matched failure-output is a FAILURE even
        if its steps succeed (its pipeline treated it as failing).
        """
        pre_failed = self._pre_fail_message()
        if run.step is not None:
            return Outcome(Result.FAILURE, _join(_describe(run.step), pre_failed or ""))
        if pre_failed is not None:
            return Outcome(Result.FAILURE, pre_failed)
        return Outcome(Result.SUCCESS, "")

    def _pause_or_veto(self, outcome: Outcome) -> Outcome:
        """Pause after a successful run when asked; honour ``zuul.retry: false``."""
        try:
            data = read_result_data(self.layout, self.options.result_data_limit)
        except ResultDataError:
            return outcome  # reported by collect_result
        if outcome.code is Result.SUCCESS and zuul_flag(data, "pause") is True:
            self._mark("PAUSED: waiting to be resumed")
            _call_hook("pause", self.control.pause, data)
            if cancel_requested(self.control.cancel_requested):
                return Outcome(Result.ABORTED, "cancelled while paused")
            self._mark("RESUMED")
        if outcome.code is Result.RETRY and zuul_flag(data, "retry") is False:
            return Outcome(Result.FAILURE, outcome.message, allow_post_result=False)
        return outcome

    def _post_deadline(self) -> float | None:
        timeout = self.spec.job.post_timeout
        return None if timeout is None else time.monotonic() + timeout

    def _aborted(self, end: _PhaseEnd) -> Outcome:
        where = f" during {end.step.phase.value} {end.step.path}" if end.step else ""
        return Outcome(Result.ABORTED, f"cancelled{where}")

    def _resolve_executables(self, locator: StepLocator) -> None:
        for phase in PHASES:
            for index, step in enumerate(steps(self.spec, phase)):
                try:
                    self.executables[(phase, index)] = locator.resolve(step)
                except RefusedError as exc:
                    raise RefusedError(f"{phase.value}: {exc}") from None

    def _mark(self, text: str) -> None:
        if self.job_log is not None:
            self.job_log.marker(text)

    def _watch(self, phase: Phase) -> Callable[[str], None] | None:
        """What sees the lines of a step of ``phase``: the run steps' failure-output."""
        if phase is Phase.RUN and self.failure_output is not None:
            return self.failure_output.check
        return None

    def _pre_failed(self, line: str) -> None:
        """A run step's line matched the job's failure-output: tell, once; run on."""
        self._mark(f"FAILURE OUTPUT matched: {_cut(line)}")
        _call_hook("on_pre_fail", self.control.on_pre_fail, line)

    def _pre_fail_message(self) -> str | None:
        if self.failure_output is None or self.failure_output.matched is None:
            return None
        return f"failure-output matched: {_cut(self.failure_output.matched)}"

    def _result(self, outcome: Outcome, data: Mapping[str, Any], held: str | None) -> BuildResult:
        return BuildResult(
            build_uuid=self.spec.context.build_uuid,
            result=outcome.code,
            message=outcome.message or outcome.code.value.lower().replace("_", " "),
            started_at=self.started_at,
            ended_at=time.time(),
            steps=tuple(self.steps),
            result_data=data,
            log_path=str(self.layout.log_file) if self.job_log is not None else "",
            log_tail=self.job_log.tail() if self.job_log is not None else (),
            held_workspace=held,
        )


def _redacted(value: Any, redact: Redactor) -> Any:
    """Result data with every secret value masked (it is stored in ZooKeeper and SQL)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k): _redacted(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, redact) for v in value]
    return value


def run_build(
    spec: BuildSpec,
    control: BuildControl,
    options: RunnerOptions,
    secrets: Mapping[str, Any] | None = None,
) -> BuildResult:
    """Run one build to its end (blocking) and return its result.

    ``secrets`` are the spec's secrets decrypted (by key), given to the
    steps they are bound to and masked in the log and the result data.

    Call it from a thread that lives until it returns: a step whose reaper
    is started directly (when the process's zygote fails, see
    :mod:`workers.executor.forkserver`) is told to die with the thread that
    started it (``PR_SET_PDEATHSIG``).
    """
    return BuildRun(spec, control, options, secrets or {}).execute()


def _describe(step: StepRun) -> str:
    what = f"{step.phase.value} {step.path}"
    if step.outcome is StepOutcome.TIMED_OUT:
        return f"{what} timed out"
    if step.outcome is StepOutcome.ABORTED:
        return f"{what} was cancelled"
    if step.exit_code is not None and step.exit_code < 0:
        return f"{what} was killed by signal {-step.exit_code}"
    if step.outcome is StepOutcome.FAILED:
        return f"{what} failed with exit code {step.exit_code}"
    return f"{what} exit 0"


def _join(first: str, second: str) -> str:
    return f"{first}; {second}" if first and second else first or second


def _cut(line: str, most: int = 200) -> str:
    """A line short enough for a message."""
    return line if len(line) <= most else line[:most] + "..."


def _call_hook(name: str, hook: Callable[..., object], *args: object) -> None:
    """Call a control hook; a failing hook is logged and never stops the build."""
    try:
        hook(*args)
    except Exception:
        log.exception("build control hook %s failed", name)
