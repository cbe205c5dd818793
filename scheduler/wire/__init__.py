"""Request and result formats shared by the scheduler and workers; JSON with a schema number.

Every record carries its ``schema`` and readers ignore fields they do not
know, so neighbouring versions of the scheduler and the workers read each
other's records.

The scheduler builds requests and reads results in these formats; workers
read the requests and write the results. Data only: nothing here does I/O
(the submitter's side of the merger queue is
:mod:`scheduler.stores.merge_requests`), nothing here imports
``scheduler.stores`` (the stores import these formats to write them), and
nothing here imports ``workers/`` (docs/architecture.md: imports run from
``workers/`` to ``scheduler/``, never back).

* :mod:`scheduler.wire.merger` — merger jobs and results, and the params of
  a merge request.
* :mod:`scheduler.wire.build_spec`, :mod:`scheduler.wire.build_result` — the
  parameters of a build request (:class:`BuildSpec`: the frozen job as it
  was frozen, and its build's context) and the result an executor writes.
"""
