"""Claim a job request, report it, then hang until killed (argv: config, queue root, uuid)."""

from __future__ import annotations

import sys

from scheduler.stores.job_requests import JobRequestQueue
from tests.zk.scripts._common import client_from_argv, say

client = client_from_argv()
claimed = JobRequestQueue(client, sys.argv[2]).claim(sys.argv[3], "doomed-worker")
say("claimed" if claimed is not None else "not-claimed")
sys.stdin.readline()
