"""What a job sees: its environment variables, its vars file, its result file.

Environment variables (documented in ``docs/executor.md``):

===========================  ==================================================
``SLUICE_TENANT``            tenant name
``SLUICE_PIPELINE``          pipeline name
``SLUICE_PROJECT``           the change's project (``org/repo``)
``SLUICE_BRANCH``            the change's branch
``SLUICE_REF``               the change's ref (``refs/changes/...``), may be empty
``SLUICE_JOB``               job name
``SLUICE_BUILD``             build uuid
``SLUICE_PHASE``             ``pre-run``, ``run`` or ``post-run``
``SLUICE_SUCCESS``           post-run only: ``true`` when pre-run and run passed
``SLUICE_WORKSPACE``         the build's workspace folder
``SLUICE_SRC_DIR``           where every project is checked out (``src/``)
``SLUICE_PROJECT_DIR``       the change's project checkout (the working directory)
``SLUICE_LOG_DIR``           the build's log folder (kept; ``job-output.txt`` is ours)
``SLUICE_VARS_FILE``         JSON object: parent data overlaid with the job's vars
``SLUICE_RESULT_FILE``       where the job may write a JSON object as result data
``SLUICE_SECRETS_FILE``      only for a step that sees secrets (set by the runner,
                             :mod:`workers.executor.secrets`)
``SLUICE_NODES``             only for a job with nodes: JSON list of
                             ``{name, label, host}``; the workspace's
                             ``nodes.json`` has them with ``id`` and ``connection``
===========================  ==================================================

``HOME`` and ``TMPDIR`` point into the workspace. Nothing else of the
worker's environment is passed on (it holds the broker URL and ZooKeeper
credentials) except the names in ``RunnerOptions.pass_env`` (``PATH``,
``LANG``, ``LC_ALL``, ``TZ`` by default).

Result data: the file starts empty; empty means no data. Otherwise it must
be a JSON object no larger than the configured limit (1 MiB by default) and
a regular file (a symlink is refused, so a job cannot publish a file it
points at). Keys under ``zuul`` are Zuul's conventions: ``pause`` and
``retry`` are read by the runner; the whole object is the build's result
data, and the scheduler passes it to dependent jobs as ``parent_data``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.jsondata import deep_merge
from scheduler.wire.build_result import Phase
from scheduler.wire.build_spec import BuildSpec
from workers.executor.errors import ResultDataError
from workers.executor.recycle import write_over
from workers.executor.workspace import BuildLayout

DEFAULT_PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
DEFAULT_RESULT_DATA_LIMIT = 1024 * 1024


def job_environment(
    spec: BuildSpec,
    layout: BuildLayout,
    phase: Phase,
    *,
    success: bool,
    pass_env: Sequence[str] = DEFAULT_PASS_ENV,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of an executable of ``phase``."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in pass_env if name in source}
    env.setdefault("PATH", os.defpath)
    job, context = spec.job, spec.context
    env.update(
        HOME=str(layout.home_dir),
        TMPDIR=str(layout.tmp_dir),
        SLUICE_TENANT=context.tenant,
        SLUICE_PIPELINE=job.pipeline,
        SLUICE_PROJECT=job.project,
        SLUICE_BRANCH=job.branch,
        SLUICE_REF=context.ref,
        SLUICE_JOB=job.name,
        SLUICE_BUILD=context.build_uuid,
        SLUICE_PHASE=phase.value,
        SLUICE_WORKSPACE=str(layout.root),
        SLUICE_SRC_DIR=str(layout.src_dir),
        SLUICE_PROJECT_DIR=str(layout.project_dir(job.project)),
        SLUICE_LOG_DIR=str(layout.log_dir),
        SLUICE_VARS_FILE=str(layout.vars_file),
        SLUICE_RESULT_FILE=str(layout.result_file),
    )
    if phase is Phase.POST_RUN:
        env["SLUICE_SUCCESS"] = "true" if success else "false"
    if context.nodes:
        env["SLUICE_NODES"] = json.dumps(
            [{k: node.get(k, "") for k in ("name", "label", "host")} for node in context.nodes]
        )
    return env


def job_vars(spec: BuildSpec) -> dict[str, Any]:
    """Parent data (without its ``zuul`` key) overlaid with the job's own vars."""
    parent = {k: v for k, v in spec.context.parent_data.items() if k != "zuul"}
    return deep_merge(parent, spec.job.vars)


def write_job_files(spec: BuildSpec, layout: BuildLayout) -> None:
    """Write the vars file and an empty result file."""
    # written over in place in a recycled workspace (recycle.py)
    text = json.dumps(job_vars(spec), indent=2, sort_keys=True) + "\n"
    write_over(layout.vars_file, text.encode())
    write_over(layout.result_file, b"")
    if spec.context.nodes:
        nodes = [dict(node) for node in spec.context.nodes]
        (layout.root / "nodes.json").write_text(json.dumps(nodes, indent=2, sort_keys=True) + "\n")


def read_result_data(layout: BuildLayout, limit: int = DEFAULT_RESULT_DATA_LIMIT) -> dict[str, Any]:
    """The job's result data; ``{}`` when it wrote none.

    Raises :class:`ResultDataError` (with a message for the build result)
    for a symlink, a non-regular file, more than ``limit`` bytes, invalid
    JSON or JSON that is not an object.
    """
    raw = _read_limited(str(layout.result_file), limit)
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ResultDataError(f"result data file is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ResultDataError(f"result data must be a JSON object, got {type(data).__name__}")
    return data


def _read_limited(path: str, limit: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ResultDataError("result data file is a symlink; write a regular file") from None
        raise ResultDataError(f"cannot read the result data file: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ResultDataError("result data file is not a regular file")
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise ResultDataError(f"result data is larger than the limit of {limit} bytes")
    return raw


def zuul_flag(data: Mapping[str, Any], name: str) -> object:
    """``data["zuul"][name]`` or None (Zuul's ``pause``/``retry`` conventions)."""
    zuul = data.get("zuul")
    return zuul.get(name) if isinstance(zuul, Mapping) else None
