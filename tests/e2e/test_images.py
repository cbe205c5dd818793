"""Image builders (seed 004) as real ``celery worker`` processes, with real faults.

A builder is a worker consuming the ``builder`` queue: its tick nudges due
builds, the ``sluice.builder.build`` task runs the image's script under the
build lock and uploads the result to the local provider's folder. These
tests build on request and on schedule, kill a builder with SIGKILL in the
middle of a build and watch its restart clean up as the seed says, and run
two builders side by side on one image.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.stack.process import is_alive
from scheduler.nudge import dispatch, task_names
from scheduler.settings.load import load_settings
from scheduler.stores.images import ImageBuild, ImageBuildState, ImageStore, ImageUpload
from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import WorkerProcess

# Fills the root with a shell, cat and their libraries (a root a sandbox can
# boot), and /etc/motd naming the build. While $MARKS/hold exists it
# waits (a build "in progress" for as long as a test wants); $MARKS/running
# is made and removed around the work, so two builds at once leave an
# "overlap" line.
SCRIPT = """\
#!/bin/sh
set -e
marks="$(dirname "$0")/marks"
mkdir -p "$marks" "$SLUICE_IMAGE_ROOT/etc" "$SLUICE_IMAGE_ROOT/proc" "$SLUICE_IMAGE_ROOT/dev"
for f in /bin/sh /bin/cat $(ldd /bin/sh /bin/cat | grep -o '/[^ :]*' | sort -u); do
    cp --parents -L "$f" "$SLUICE_IMAGE_ROOT/"
done
echo "partial" > "$SLUICE_IMAGE_ROOT/partial"
touch "$marks/$SLUICE_IMAGE-$SLUICE_IMAGE_BUILD.started"
mkdir "$marks/running-$SLUICE_IMAGE" 2>/dev/null || echo "$SLUICE_IMAGE_BUILD" >> "$marks/overlap"
while [ -e "$marks/hold" ]; do sleep 0.1; done
sleep "${SLOW:-0}"
rm "$SLUICE_IMAGE_ROOT/partial"
echo "$SLUICE_IMAGE build $SLUICE_IMAGE_BUILD" > "$SLUICE_IMAGE_ROOT/etc/motd"
rmdir "$marks/running-$SLUICE_IMAGE"
"""


def _images_yaml(root: Path, build_dir: str, images: str) -> str:
    return textwrap.dedent(
        f"""
        images:
          check_interval: 1
          build_dir: {build_dir}
          providers:
            local:
              image_dir: {root / "uploads"}
          diskimages:
        """
    ) + textwrap.indent(textwrap.dedent(images), "  ")


def _configure(system: SluiceSystem, images: str, builders: int = 1) -> list[Path]:
    """A config file per builder (each its own build folder, so its own builder id)."""
    script = system.root / "build.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    base = system.config.read_text()
    configs = []
    for n in range(builders):
        path = system.config if n == 0 else system.root / f"sluice-{n}.yaml"
        path.write_text(base + _images_yaml(system.root, f"builds-{n}", images))
        configs.append(path)
    return configs


def _builder(system: SluiceSystem, config: Path, **env: str) -> WorkerProcess:
    return system.start_worker(("builder",), env={"SLUICE_CONFIG": str(config), **env})


@pytest.fixture
def store(system: SluiceSystem) -> Iterator[ImageStore]:
    client: ZooKeeperClient = connect(system.environment.zookeeper.settings())
    yield ImageStore(client)
    client.stop()
    client.close()


def _running(script: Path) -> list[int]:
    """Pids of processes running ``script`` (the reaper kills them when the worker dies)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(script).encode() in argv:
            found.append(int(entry.name))
    return found


def _boot(root: str, command: str) -> str:
    """Run ``command`` in a sandbox whose root file system is the image (a local node)."""
    argv = ["bwrap", "--ro-bind", root, "/", "--proc", "/proc", "--dev", "/dev"]
    done = subprocess.run(
        [*argv, "--unshare-all", "/bin/sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


def _uploaded(store: ImageStore, image: str, build_id: str) -> ImageUpload:
    """The highest ready upload to ``local``, once it is of ``build_id``."""

    def latest() -> ImageUpload | None:
        upload = store.latest_upload(image, "local")
        return upload if upload is not None and upload.build_id == build_id else None

    return wait_until(latest, 30, f"build {build_id} of {image} uploaded")


def _ready(store: ImageStore, image: str) -> list[ImageBuild]:
    return [b for b in store.builds(image) if b.state == ImageBuildState.READY]


def test_builds_on_request_and_on_schedule_and_serves_the_newest(
    system: SluiceSystem, store: ImageStore
) -> None:
    _configure(
        system,
        """
        - name: base
          script: build.sh
          rebuild_interval: 0
          providers: [local]
        - name: fresh
          script: build.sh
          rebuild_interval: 3
          rebuild_jitter: 1
          keep: 2
          providers: [local]
        """,
    )
    _builder(system, system.config)
    first = wait_until(lambda: _ready(store, "base"), 60, "the missing image built")[0]
    system.sluice("image", "build", "base")
    second = wait_until(
        lambda: [b for b in _ready(store, "base") if b.id != first.id], 60, "the requested build"
    )[0]
    assert int(second.id) > int(first.id)
    assert not store.build_requested("base")

    upload = _uploaded(store, "base", second.id)
    motd = Path(upload.external_id) / "etc" / "motd"
    assert motd.read_text() == f"base build {second.id}\n"
    assert _boot(upload.external_id, "cat /etc/motd") == f"base build {second.id}\n"
    assert upload.external_id.startswith(str(system.root / "uploads"))

    # on schedule: "fresh" is rebuilt every 3-4 s; keep 2 deletes the older ones
    fresh = wait_until(lambda: len(_ready(store, "fresh")) >= 2, 60, "a scheduled rebuild")
    assert fresh
    built = _ready(store, "fresh")
    assert built[1].state_time - built[0].state_time >= 3.0
    gone = built[0]
    wait_until(lambda: store.build("fresh", gone.id) is None, 60, "an old build deleted")
    assert not (system.root / "builds-0" / gone.filename).exists()
    assert not any(
        p.name.startswith(f"fresh-{gone.id}-") for p in (system.root / "uploads").iterdir()
    )

    listing = json.loads(system.sluice("image", "list", "--json", "base"))
    assert [b["id"] for b in listing[0]["builds"]][-1] == second.id
    assert listing[0]["builds"][-1]["uploads"][0]["external_id"] == upload.external_id
    text = system.sluice("image", "list")
    assert f"build {second.id}  ready" in text and upload.external_id in text

    system.sluice("image", "delete", "base", second.id)
    wait_until(lambda: store.build("base", second.id) is None, 30, "the deleted build removed")
    assert not Path(upload.external_id).exists()
    after = store.latest_upload("base", "local")
    assert after is not None and after.build_id == first.id
    assert "no image" in system.sluice("image", "build", "nope", expect=1)


def test_a_builder_killed_mid_build_cleans_up_when_it_restarts(
    system: SluiceSystem, store: ImageStore
) -> None:
    system.environment.session_timeout = 4.0
    _configure(
        system,
        """
        - name: base
          script: build.sh
          rebuild_interval: 0
          providers: [local]
        """,
    )
    marks = system.root / "marks"
    marks.mkdir()
    (marks / "hold").touch()
    doomed = _builder(system, system.config)
    building = wait_until(
        lambda: [b for b in store.builds("base") if b.state == ImageBuildState.BUILDING],
        60,
        "a build in progress",
    )[0]
    wait_until((marks / f"base-{building.id}.started").exists, 30, "the script")
    root = system.root / "builds-0" / building.filename
    assert (root / "partial").exists()
    doomed.kill(signal.SIGKILL)
    wait_until(lambda: not is_alive(doomed.pid), 10, "the builder dead")

    left = store.build("base", building.id)
    assert left is not None and left.state == ImageBuildState.BUILDING, "as the seed says"
    assert root.exists()
    wait_until(lambda: not _running(system.root / "build.sh"), 30, "the script killed too")
    (marks / "hold").unlink()
    (marks / "running-base").rmdir()  # the killed script's marker

    _builder(system, system.config)
    wait_until(lambda: store.build("base", building.id) is None, 60, "the incomplete build gone")
    assert not root.exists()
    assert not (system.root / "builds-0" / f"{building.filename}.log").exists()
    rebuilt = wait_until(lambda: _ready(store, "base"), 60, "a new build")[0]
    assert int(rebuilt.id) > int(building.id)
    assert rebuilt.builder == building.builder, "the same builder, restarted"
    upload = _uploaded(store, "base", rebuilt.id)
    assert (Path(upload.external_id) / "etc" / "motd").read_text() == f"base build {rebuilt.id}\n"


def test_two_builders_never_build_one_image_at_once(
    system: SluiceSystem, store: ImageStore
) -> None:
    configs = _configure(
        system,
        """
        - name: base
          script: build.sh
          rebuild_interval: 0
          keep: 10
          providers: [local]
        """,
        builders=2,
    )
    for config in configs:
        _builder(system, config, SLOW="1")
    conf = load_settings(system.config, environ=system.env())
    wait_until(lambda: _ready(store, "base"), 60, "the first build")
    for _ in range(3):
        count = len(store.builds("base"))
        system.sluice("image", "build", "base")
        for _ in range(4):  # extra nudges, as duplicate deliveries would be
            dispatch.send_quickly(task_names.IMAGE_BUILD, "base", settings=conf)
        wait_until(
            lambda c=count: len(store.builds("base")) > c and not store.build_requested("base"),
            60,
            "the requested build started",
        )
        wait_until(lambda: not store.build_lock_holders("base"), 60, "the build finished")
    builds = store.builds("base")
    assert [b.state for b in builds] == ["ready"] * len(builds)
    assert not (system.root / "marks" / "overlap").exists()
    spans = sorted((b.started, b.state_time) for b in builds)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, "a build started before the previous one finished"
    assert len(builds) == 4, "one build per request, however many nudges"
    logs = "".join(w.log_text() for w in system.started)
    assert "'outcome': 'busy'" in logs, "the nudges met the lock"
