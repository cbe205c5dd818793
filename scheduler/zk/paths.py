"""The ZooKeeper paths of Sluice's tree, and the helpers every path is built with.

Every path is built here but those of Nodepool's subtree (nodes, node
requests, images, launchers), which :mod:`scheduler.zk.paths_nodepool`
builds with this module's :func:`segment` and :func:`join`.

The tree follows the ZooKeeper map of Zuul (seed 000) with the root renamed:
the client's chroot is the configured root (default ``/sluice``), so the
paths here are absolute within it (``/events/...`` is ``/sluice/events/...``
on the server). docs/zookeeper.md lists the tree as built and every
departure from the seed.

Names from outside (tenants, projects, branches, refs, jobs, hostnames) are
encoded with :func:`segment` before they become path segments: ``/`` can
never add a level, ``.``/``..`` never name a parent, and characters that
ZooKeeper or kazoo reject (NUL, control characters, lone surrogates) never
reach the wire. No module but these two formats a path by hand.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from urllib.parse import quote, unquote

from scheduler.zk.errors import InvalidNameError

# Segments are kept well under any limit; longer encodings keep a readable
# prefix and end in "%%" plus a hash of the name, a shape quote() never makes.
MAX_SEGMENT = 200
_HASH_MARK = "%%"

SYSTEM_ROOT = "/system"
LTIME = "/ltime"


# The memos of the paths below hold what the passes build again and again:
# every live item's, buildset's, job's and build's path (a pipeline of 500
# items of 3 jobs needs about 1,500 builds' paths). They are kept to that
# order, since every entry is of a uuid that the day's work leaves behind:
# memos of 65,536 segments and 16,384 paths of each kind held 27 MB after a
# peak day's 20,400 builds, these 9. A name that is its own segment (letters
# and digits: a uuid's hex, most job and pipeline names) is returned as it
# is and never memoized: in a worker that only sees each request's uuid a
# few times (an executor, a merger), the memo of segments would otherwise
# fill with a day's uuids, some 2 MB a process, and its memory grow with it
# through the first half of the day.
SEGMENTS_MEMO = 8192
PATHS_MEMO = 4096


def segment(name: str) -> str:
    """Encode an outside name as one safe path segment (``feature/x`` -> ``feature%2Fx``).

    Injective: two different names never give the same segment. The output
    is ASCII, never ``.``/``..``, never contains ``/`` and is at most
    :data:`MAX_SEGMENT` characters.
    """
    if type(name) is str and name.isascii() and name.isalnum() and len(name) <= MAX_SEGMENT:
        return name  # what quote() leaves as it is
    return _encoded(name)


@functools.lru_cache(maxsize=SEGMENTS_MEMO)
def _encoded(name: str) -> str:
    """:func:`segment` of a name that needs encoding (or checking), memoized."""
    if not isinstance(name, str) or name == "":
        raise InvalidNameError(f"a path segment needs a non-empty name, got {name!r}")
    # surrogatepass: a lone surrogate becomes its (unique) 3-byte encoding.
    encoded = quote(name, safe="", errors="surrogatepass")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    if len(encoded) > MAX_SEGMENT:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
        encoded = encoded[: MAX_SEGMENT - len(_HASH_MARK) - len(digest)] + _HASH_MARK + digest
    return encoded


def unsegment(encoded: str) -> str:
    """The name behind a segment (not possible for hashed long names: returned as is)."""
    if _HASH_MARK in encoded:
        return encoded
    return unquote(encoded, errors="surrogatepass")


def join(*parts: str) -> str:
    """Join already-safe parts (constants or :func:`segment` output) into a path."""
    return "/" + "/".join(p.strip("/") for p in parts if p.strip("/"))


def parent(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _s(*names: str) -> list[str]:
    return [segment(n) for n in names]


# ---------------------------------------------------------------- system


def roundtrip(token: str) -> str:
    """The node the foundation round-trip task writes (``sluice demo``)."""
    return join(SYSTEM_ROOT, "roundtrip", segment(token))


def system_conf() -> str:
    return join(SYSTEM_ROOT, "conf")


def system_conf_lock() -> str:
    return join(SYSTEM_ROOT, "conf-lock")


def ltime() -> str:
    return LTIME


# ---------------------------------------------------------------- caches


def connection_cache(connection: str) -> str:
    return join("cache", "connection", segment(connection))


def branch_cache_data(connection: str) -> str:
    return join(connection_cache(connection), "branches", "data")


def branch_cache_lock(connection: str) -> str:
    return join(connection_cache(connection), "branches", "lock")


def change_cache(connection: str) -> str:
    return join(connection_cache(connection), "cache")


def change_cache_entry(connection: str, key: str) -> str:
    """Entries are named by the sha256 of their cache key (as in the seed)."""
    return join(change_cache(connection), hashlib.sha256(key.encode()).hexdigest())


def change_cache_data(connection: str, data_uuid: str) -> str:
    return join(connection_cache(connection), "data", segment(data_uuid))


def blob_data(content_key: str) -> str:
    """Blob store data, named by the sha256 of the content key."""
    return join("cache", "blob", "data", hashlib.sha256(content_key.encode()).hexdigest())


def blob_lock(content_key: str) -> str:
    return join("cache", "blob", "lock", hashlib.sha256(content_key.encode()).hexdigest())


# ---------------------------------------------------------------- cleanup locks

CLEANUP_NAMES = (
    "build_requests",
    "connection",
    "general",
    "merge_requests",
    "node_request",
    "semaphores",
)


def cleanup_lock(name: str) -> str:
    if name not in CLEANUP_NAMES:
        raise InvalidNameError(f"unknown cleanup lock {name!r}; one of {CLEANUP_NAMES}")
    return join("cleanup", name)


# ---------------------------------------------------------------- components

COMPONENT_KINDS = (
    "builder",
    "executor",
    "fingergw",
    "launcher",
    "maintenance",
    "merger",
    "scheduler",
    "web",
    "worker",
)


def sweep_stats() -> str:
    """Totals of what sweeps did (recoveries, re-nudges), for metrics."""
    return "/stats/sweep"


def pipeline_stats_root() -> str:
    """Per pipeline counters kept with its passes (``scheduler/stores/pipeline_stats.py``)."""
    return "/stats/pipelines"


def pipeline_stats(tenant: str, pipeline: str) -> str:
    return join(pipeline_stats_root(), *_s(tenant, pipeline))


def provided_root() -> str:
    """What changes' providing jobs left, per pipeline (``scheduler/stores/provided.py``)."""
    return "/provided"


def provided(tenant: str, pipeline: str, change_key: str) -> str:
    return join(provided_root(), *_s(tenant, pipeline, change_key))


def timings_root() -> str:
    """Histograms of durations observed by many processes (``scheduler/stores/timings.py``)."""
    return "/stats/timings"


def hold_requests() -> str:
    """Autohold requests (``sluice autohold``); an addition to seed 000's map."""
    return "/hold-requests"


def hold_request(request_id: str) -> str:
    return join(hold_requests(), segment(request_id))


def components_root() -> str:
    return join("components")


def components(kind: str) -> str:
    return join(components_root(), segment(kind))


def component_prefix(kind: str, hostname: str) -> str:
    """Prefix of a component's ephemeral sequence node (ZooKeeper appends the number)."""
    return join(components(kind), segment(hostname) + "-")


# ---------------------------------------------------------------- keys


def keystorage(connection: str, project: str, kind: str = "secrets") -> str:
    """A project's key pair of ``kind`` (``secrets``, ``ssh``), its private key encrypted
    (``stores/keystore.py``)."""
    return join("keystorage", *_s(connection, project), segment(kind))


# ---------------------------------------------------------------- config


def config_cache(project: str, branch: str | None = None, filename: str | None = None) -> str:
    parts = [segment(project)]
    if branch is not None:
        parts.append(segment(branch))
        if filename is not None:
            parts.append(segment(filename))
    return join("config", "cache", *parts)


def config_lock(project: str) -> str:
    return join("config", "lock", segment(project))


# ---------------------------------------------------------------- event queues
# An event queue root holds ``queue/`` (sequence nodes) and ``data/``
# (sharded payloads too large to sit inline).


def event_queue_items(queue_root: str) -> str:
    return join(queue_root, "queue")


def event_queue_data(queue_root: str) -> str:
    return join(queue_root, "data")


def connection_event_queue(connection: str) -> str:
    return join("events", "connection", segment(connection), "events")


def connection_event_election(connection: str) -> str:
    return join(connection_event_queue(connection), "election")


def poller_root(connection: str) -> str:
    """A git connection's pollers: members, partition locks and offsets."""
    return join("connections", segment(connection), "pollers")


def poller_members(connection: str) -> str:
    """Ephemeral node per polling worker, listing the partitions it handles (seed 002)."""
    return join(poller_root(connection), "members")


def poller_partition_lock(connection: str, partition: int) -> str:
    return join(poller_root(connection), "partitions", str(partition), "lock")


def poller_partition_offset(connection: str, partition: int) -> str:
    """The refs last seen for the partition's projects (what the next poll compares to)."""
    return join(poller_root(connection), "partitions", str(partition), "offset")


def webhook_deliveries(connection: str) -> str:
    """Webhook delivery ids stored, by UTC day (``YYYYMMDD``); the sweep prunes old days."""
    return join("connections", segment(connection), "deliveries")


def webhook_delivery(connection: str, day: str, delivery: str) -> str:
    """Marks a webhook delivery id as stored (a replayed delivery is stored once)."""
    return join(webhook_deliveries(connection), segment(day), segment(delivery))


def connection_deferred_queue(connection: str) -> str:
    """Deliveries to translate again later (their forge was unavailable): an event queue."""
    return join("events", "connection", segment(connection), "deferred")


def set_aside_deliveries(connection: str) -> str:
    """Deliveries that could not be turned into events, each with its reason."""
    return join("connections", segment(connection), "set-aside")


def set_aside_delivery(connection: str, delivery: str) -> str:
    """One set-aside delivery (by its delivery id); its payload is the child ``body``."""
    return join(set_aside_deliveries(connection), segment(delivery))


def set_aside_body(connection: str, delivery: str) -> str:
    return join(set_aside_delivery(connection, delivery), "body")


def connections_root() -> str:
    return "/connections"


def timer_lock() -> str:
    """The timer generator's election: its holder alone fires periodic pipelines."""
    return join("timer", "lock")


def timer_state() -> str:
    """When each timer trigger last fired (seconds), by key."""
    return join("timer", "state")


def tenant_events(tenant: str) -> str:
    return join("events", "tenant", segment(tenant))


def tenant_parked_changes(tenant: str) -> str:
    """Changes waiting for a dependency to enter a pipeline (scheduler/processing/behind.py)."""
    return join(tenant_events(tenant), "parked")


def tenant_management_queue(tenant: str) -> str:
    return join(tenant_events(tenant), "management")


def tenant_trigger_queue(tenant: str) -> str:
    return join(tenant_events(tenant), "trigger")


def tenant_event_state(tenant: str) -> str:
    """Whether the tenant's trigger and result event queues are paused or discarding."""
    return join(tenant_events(tenant), "state")


def tenant_reconfigure_queue(tenant: str) -> str:
    """Requests to reconfigure the tenant (a merged config change, a new tenant file)."""
    return join(tenant_events(tenant), "reconfigure")


def tenant_reconfigure_error(tenant: str) -> str:
    """Why the tenant's last requested reconfiguration failed (absent once one succeeds)."""
    return join("config", "reconfigure-errors", segment(tenant))


def tenant_file_state() -> str:
    """The digest of the tenant file the last reconfiguration requests were made for."""
    return join("config", "tenant-file")


def pipeline_events(tenant: str, pipeline: str) -> str:
    return join(tenant_events(tenant), "pipelines", segment(pipeline))


def pipeline_management_queue(tenant: str, pipeline: str) -> str:
    return join(pipeline_events(tenant, pipeline), "management")


def pipeline_result_queue(tenant: str, pipeline: str) -> str:
    return join(pipeline_events(tenant, pipeline), "result")


def pipeline_trigger_queue(tenant: str, pipeline: str) -> str:
    return join(pipeline_events(tenant, pipeline), "trigger")


# ---------------------------------------------------------------- job request queues

REQUEST_CHILDREN = ("requests", "locks", "params", "result-data", "results", "waiters")


def executor_queue(zone: str | None = None) -> str:
    """The unzoned executor queue, or the queue of one zone."""
    if zone is None:
        return join("executor", "unzoned")
    return join("executor", "zones", segment(zone))


def merger_queue() -> str:
    return join("merger")


def request_child(queue_root: str, child: str, request_uuid: str | None = None) -> str:
    """``<queue>/<child>[/<uuid>]`` for one of :data:`REQUEST_CHILDREN`."""
    if child not in REQUEST_CHILDREN:
        raise InvalidNameError(f"unknown job request queue child {child!r}")
    if request_uuid is None:
        return join(queue_root, child)
    return join(queue_root, child, segment(request_uuid))


def request_flag(queue_root: str, request_uuid: str, flag: str) -> str:
    """The ``cancel``/``resume`` child of a request."""
    if flag not in ("cancel", "resume"):
        raise InvalidNameError(f"unknown request flag {flag!r}")
    return join(request_child(queue_root, "requests", request_uuid), flag)


# ---------------------------------------------------------------- elections


def timer_election() -> str:
    return join("scheduler", "timer-election")


def scheduler_stats_election() -> str:
    return join("scheduler", "stats-election")


# ---------------------------------------------------------------- layouts


def layout_state(tenant: str) -> str:
    return join("layout", segment(tenant))


def layout_data(layout_uuid: str) -> str:
    return join("layout-data", segment(layout_uuid))


# ---------------------------------------------------------------- locks


def connection_lock(connection: str, name: str) -> str:
    return join("locks", "connection", *_s(connection, name))


def database_migration_lock() -> str:
    # Seed: zuul/locks/connection/database/migration (a fixed name, no connection).
    return join("locks", "connection", "database", "migration")


def trigger_queue_lock(tenant: str) -> str:
    return join("locks", "events", "trigger", segment(tenant))


def management_queue_lock(tenant: str) -> str:
    return join("locks", "events", "management", segment(tenant))


def pipeline_lock(tenant: str, pipeline: str) -> str:
    return join("locks", "pipeline", *_s(tenant, pipeline))


def tenant_lock(tenant: str) -> str:
    return join("locks", "tenant", segment(tenant))


# ---------------------------------------------------------------- results, semaphores


def management_result(event_uuid: str) -> str:
    return join("results", "management", segment(event_uuid))


def global_semaphore(name: str) -> str:
    return join("global-semaphores", segment(name))


def semaphore(tenant: str, name: str) -> str:
    return join("semaphores", *_s(tenant, name))


# ---------------------------------------------------------------- pipeline state


@functools.lru_cache(maxsize=PATHS_MEMO)  # pure; a pass builds these paths per item
def tenant_state(tenant: str) -> str:
    return join("tenant", segment(tenant))


@functools.lru_cache(maxsize=PATHS_MEMO)  # pure; a pass builds these paths per item
def pipeline_state(tenant: str, pipeline: str) -> str:
    return join(tenant_state(tenant), "pipeline", segment(pipeline))


def pipeline_report_retry(tenant: str, pipeline: str) -> str:
    """Flag: an item of the pipeline waits to report again (its database was down)."""
    return join(pipeline_state(tenant, pipeline), "report-retry")


def pipeline_dirty(tenant: str, pipeline: str) -> str:
    return join(pipeline_state(tenant, pipeline), "dirty")


def pipeline_queues(tenant: str, pipeline: str) -> str:
    return join(pipeline_state(tenant, pipeline), "queue")


def pipeline_queue(tenant: str, pipeline: str, queue_name: str) -> str:
    return join(pipeline_queues(tenant, pipeline), segment(queue_name))


@functools.lru_cache(maxsize=PATHS_MEMO)  # pure; a pass builds these paths per item
def item(tenant: str, pipeline: str, item_uuid: str) -> str:
    return join(pipeline_state(tenant, pipeline), "item", segment(item_uuid))


@dataclass(frozen=True)
class BuildsetRef:
    """Where a buildset lives: tenant, pipeline, item and buildset uuids."""

    tenant: str
    pipeline: str
    item_uuid: str
    buildset_uuid: str


@functools.lru_cache(maxsize=PATHS_MEMO)  # pure; a pass builds these paths per item
def buildset(ref: BuildsetRef) -> str:
    item_path = item(ref.tenant, ref.pipeline, ref.item_uuid)
    return join(item_path, "buildset", segment(ref.buildset_uuid))


def repo_state(ref: BuildsetRef) -> str:
    return join(buildset(ref), "repo_state")


@functools.lru_cache(maxsize=PATHS_MEMO)  # pure; a pass builds these paths per item
def frozen_job(ref: BuildsetRef, job_name: str) -> str:
    return join(buildset(ref), "job", segment(job_name))


@functools.lru_cache(maxsize=PATHS_MEMO)  # pure; a pass builds these paths per item
def build(ref: BuildsetRef, job_name: str, build_uuid: str) -> str:
    return join(frozen_job(ref, job_name), "build", segment(build_uuid))


def build_parameters(ref: BuildsetRef, job_name: str, build_uuid: str) -> str:
    return join(build(ref, job_name, build_uuid), "parameters")


def provider_config(tenant: str, provider: str) -> str:
    return join(tenant_state(tenant), "provider", segment(provider), "config")


# ---------------------------------------------------------------- inventories
# Parents whose children name tenants, pipelines and connections (for sweeps
# and `sluice wait`; never listed on a hot path).


def connection_events_root() -> str:
    return join("events", "connection")


def tenant_events_root() -> str:
    return join("events", "tenant")


def pipeline_events_root(tenant: str) -> str:
    return join(tenant_events(tenant), "pipelines")


def semaphores_root(tenant: str | None = None) -> str:
    """Parent of a tenant's semaphores, or of every tenant's (``None``)."""
    return join("semaphores", segment(tenant)) if tenant else join("semaphores")


def global_semaphores_root() -> str:
    return join("global-semaphores")


def tenants_root() -> str:
    return join("tenant")


def pipelines_root(tenant: str) -> str:
    return join(tenant_state(tenant), "pipeline")


# ---------------------------------------------------------------- config cache by connection
# The config cache as implemented (scheduler/stores/config_cache.py): one level
# per connection, so two connections may hold projects of the same name.


def config_project(connection: str, project: str) -> str:
    return join("config", "cache", *_s(connection, project))


def config_branch(connection: str, project: str, branch: str) -> str:
    """A project branch's index node; its files are below it, named by digest."""
    return join(config_project(connection, project), segment(branch))


def config_file(connection: str, project: str, branch: str, digest: str) -> str:
    return join(config_branch(connection, project, branch), "files", segment(digest))


def layout_root() -> str:
    """Parent of the layout states; its data version is bumped by every state write."""
    return join("layout")
