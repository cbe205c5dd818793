"""What the faces read (the CLI, the web face, the demo): views computed from ZooKeeper.

``idle``: what is still pending; ``status``: pipelines, queues, items and jobs.
"""
