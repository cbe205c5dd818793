"""Pipeline and queue objects in a layout.

Pipeline options (manager, precedence, supercedes, triggers, reporters,
window, require/reject) and the lookup of a project's shared queue.
"""

from __future__ import annotations

from tests.config.builders import with_base


def test_pipeline_objects() -> None:
    extra = """
    - pipeline:
        name: post
        manager: supercedent
        precedence: low
        supercedes: [check]
        trigger:
          timer:
            - time: '0 0 * * *'
        success:
          sql: {}
    - pipeline:
        name: merge
        manager: dependent
        window: 10
        window-floor: 2
        window-increase-type: exponential
        window-decrease-factor: 3
        require:
          github: {open: true, label: ready}
        reject:
          gitlab: {merged: true}
        failure:
          github: {comment: true}
    """
    result = with_base(extra)
    assert result.errors == ()
    post = result.layout.pipelines["post"]
    assert (post.manager, post.precedence, post.supercedes) == ("supercedent", "low", ("check",))
    assert post.trigger == {"timer": ({"time": "0 0 * * *"},)}
    merge = result.layout.pipelines["merge"]
    assert merge.window is not None
    assert (merge.window.window, merge.window.floor, merge.window.increase_type) == (
        10,
        2,
        "exponential",
    )
    assert merge.window.decrease_factor == 3 and merge.window.decrease_type == "exponential"
    assert merge.require == {"github": {"open": True, "label": "ready"}}
    assert result.layout.pipelines["check"].dequeue_on_new_patchset is True


def test_queue_lookup() -> None:
    extra = "- queue: {name: integrated, per-branch: true}\n"
    app = {
        "main": {
            "zuul.yaml": "- job: {name: x}\n- project: {queue: integrated, gate: {jobs: [x]}}\n"
        }
    }
    result = with_base(extra, app=app)
    assert result.errors == ()
    assert result.layout.queue_for("app", "main", "gate") == ("integrated", True)
    assert result.layout.queue_for("lib", "main", "gate") is None


def test_batches_of_a_pipeline_and_of_a_queue() -> None:
    extra = """
    - pipeline:
        name: merge
        manager: dependent
        batch: {size: 8, max-wait: 30}
        pending-failure-depth: 2
        failure-verdict: true
    - queue:
        name: integrated
        batch: {size: 4, max-wait: 2.5, max-bisect-depth: 1}
        pending-failure-depth: 0
    """
    result = with_base(extra)
    assert result.errors == ()
    batch = result.layout.pipelines["merge"].batch
    assert batch is not None and (batch.size, batch.max_wait, batch.max_bisect_depth) == (8, 30, 1)
    queue = result.layout.queues["integrated"].batch
    assert queue is not None and (queue.size, queue.max_wait, queue.max_bisect_depth) == (4, 2.5, 1)
    assert result.layout.pipelines["merge"].pending_failure_depth == 2
    assert result.layout.pipelines["merge"].failure_verdict is True
    assert result.layout.queues["integrated"].pending_failure_depth == 0
