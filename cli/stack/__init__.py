"""The local stack: ZooKeeper, Redis and Celery workers as child processes.

Used by ``sluice stack up|down|status`` and by the test fixtures, so the
tests start their services exactly the way an operator's machine does.
"""
