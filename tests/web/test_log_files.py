"""Build logs are served as plain files under the log dir, never through a link.

A job writes in its own log folder, so it can put anything there: after a
real check pipeline ran, its logs are replaced by what a hostile job would
leave (a symbolic link to a file holding a secret, the whole build folder
as a link, a FIFO, a folder) and the history rows are pointed elsewhere
(``/etc``, a path that climbs out of the log dir). Each answers 404 at
once, the secret never appears, and the web's log names the refusal; a
recorded folder inside the log dir is still served.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import httpx
from sqlalchemy import update
from sqlalchemy.orm import Session

from scheduler.reporting import open_database
from scheduler.reporting.models import BuildRow
from scheduler.settings.load import load_settings
from tests.web.server import WebServer
from tests.web.test_api import ran_check

SECRET = "TOP-SECRET-HOST-FILE-CONTENT"


def log_of(web: WebServer, uuid: str, suffix: str = "") -> httpx.Response:
    """The log by offset, its stream (``/stream``) or the file of its folder URL
    (``/job-output.txt``, where a build's ``log_url`` leads)."""
    return httpx.get(f"{web.url}/api/tenant/demo/build/{uuid}/log{suffix}", timeout=10)


def log_file(web: WebServer, uuid: str) -> Path:
    """Where the executor wrote the build's log (its history row records it)."""
    settings = load_settings(web.system.config, environ=web.system.env())
    return settings.log_dir / uuid / "job-output.txt"


def set_log_url(web: WebServer, uuid: str, log_url: str) -> None:
    settings = load_settings(web.system.config, environ=web.system.env())
    engine = open_database(settings.database_url)
    with Session(engine) as session:
        session.execute(update(BuildRow).where(BuildRow.uuid == uuid).values(log_url=log_url))
        session.commit()
    engine.dispose()


def test_links_fifos_and_foreign_folders_are_not_served(web: WebServer, tmp_path: Path) -> None:
    ran_check(web)
    builds = [b for b in web.get("/api/tenant/demo/builds") if log_file(web, b["uuid"]).is_file()]
    for build in builds:
        for suffix in ("", "/job-output.txt"):
            served = log_of(web, build["uuid"], suffix)
            assert served.status_code == 200
            assert served.content == log_file(web, build["uuid"]).read_bytes()
    first, second = builds[:2]  # (lint and experimental run whatever becomes of unit)
    log_dir = log_file(web, first["uuid"]).parent.parent
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "job-output.txt").write_text(SECRET)

    def refused(uuid: str) -> None:
        started = time.monotonic()
        for suffix in ("", "/stream", "/job-output.txt"):
            answer = log_of(web, uuid, suffix)
            assert answer.status_code == 404, answer.text
            assert SECRET not in answer.text and str(tmp_path) not in answer.text
        assert time.monotonic() - started < 5  # nothing was waited on

    # job-output.txt a symbolic link to a file with a secret
    log = log_file(web, first["uuid"])
    log.unlink()
    log.symlink_to(secret / "job-output.txt")
    refused(first["uuid"])
    # the build's folder a symbolic link to a folder with a job-output.txt
    uuid = second["uuid"]
    folder = log_dir / uuid
    shutil.rmtree(folder)
    folder.symlink_to(secret)
    refused(uuid)
    # a FIFO (an open for reading would wait for a writer), then a folder
    folder.unlink()
    folder.mkdir()
    log = folder / "job-output.txt"
    os.mkfifo(log)
    refused(uuid)
    log.unlink()
    log.mkdir()
    refused(uuid)

    # no log of its own: the recorded folder, only inside the log dir
    shutil.rmtree(folder)
    for outside in ("/etc", "/etc/job-output.txt", f"{log_dir}/../../etc", str(secret)):
        set_log_url(web, uuid, outside)
        refused(uuid)
    moved = log_dir / "moved" / uuid / "job-output.txt"
    moved.parent.mkdir(parents=True)
    moved.write_text("the moved log\n")
    set_log_url(web, uuid, str(moved))
    assert log_of(web, uuid).text == "the moved log\n"
    assert log_of(web, uuid, "/job-output.txt").text == "the moved log\n"
    set_log_url(web, uuid, str(moved.parent))  # a folder, as older rows record it
    assert log_of(web, uuid).text == "the moved log\n"
    # a link on the way to the recorded folder
    (log_dir / "moved").rename(log_dir / "moved-away")
    (log_dir / "moved").symlink_to(log_dir / "moved-away")
    refused(uuid)

    text = web.log.read_text()
    assert "log refused: job-output.txt: a symbolic link" in text
    assert f"{uuid}: log refused: {uuid}: a symbolic link" in text
    assert f"{uuid}: log refused: recorded log folder '/etc' is outside" in text
    assert "is not a regular file" in text
