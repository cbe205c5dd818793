"""Request and result formats shared by the scheduler and workers; JSON with a schema number.

Every record carries its ``schema`` and readers ignore fields they do not
know, so neighbouring versions of the scheduler and the workers read each
other's records.

The scheduler builds requests and reads results in these formats; workers
read the requests and write the results. Nothing here does I/O except the
submitter helpers of :mod:`scheduler.wire.merge_requests`, and nothing here
imports ``workers/`` (docs/architecture.md: imports run from ``workers/``
to ``scheduler/``, never back).

* :mod:`scheduler.wire.merger` — merger jobs and results, and the params of
  a merge request.
* :mod:`scheduler.wire.build_spec`, :mod:`scheduler.wire.build_result` — the
  parameters of a build request (:class:`BuildSpec`) and the result an
  executor writes; :mod:`scheduler.wire.build_from_job` makes a spec from a
  frozen job and a buildset's repo state.
"""
