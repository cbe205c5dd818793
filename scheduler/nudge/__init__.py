"""Nudges: the Celery messages that name where to look (docs/architecture.md invariant 2), by role.

- :mod:`~scheduler.nudge.task_names`: the name of every Sluice task and the
  queue it goes to (a build's: its zone's executor queue);
- :mod:`~scheduler.nudge.task_labels`: how a task reads in Flower and in
  logs, and the arguments read back from a label;
- :mod:`~scheduler.nudge.dispatch`: sending a nudge by name: the client
  Celery app, the broker check, builds, merges and pipeline nudges, the
  fast way when it can, through Celery otherwise;
- :mod:`~scheduler.nudge.envelope`: the messages kombu's Redis transport
  carries (a Celery protocol-2 task message, an event, kombu's envelope),
  written by hand, and the kombu and Celery releases whose layout they are;
- :mod:`~scheduler.nudge.kept_connection`: the fast way of long-lived
  processes: task messages and task events pushed over one kept Redis
  connection per process;
- :mod:`~scheduler.nudge.fresh_socket`: the fast way of short-lived
  commands: one message pushed over a fresh socket, without Celery;
- :mod:`~scheduler.nudge.pending_marks`: one waiting nudge per pipeline
  (a result's nudge skipped while another waits to start);
- :mod:`~scheduler.nudge.resend`: a task found by its id and sent again
  (``sluice retry``).

Import each name from the module that defines it; this package re-exports nothing.
"""
