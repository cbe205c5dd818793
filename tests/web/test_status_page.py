"""The status page in headless Chromium while a gate of three changes runs.

Playwright drives Debian's ``chromium``: the page lists the items as
server-sent events arrive (no reload), a job's progress bar grows, a
finished item leaves the page, and a build's page streams its log while
the job runs. Screenshots are kept under ``artifacts/``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.e2e.system import TENANT_YAML
from tests.e2e.test_failure_output import app as prefail_app
from tests.e2e.test_gate import CONFIG as GATE_CONFIG
from tests.fixtures.services import missing_service
from tests.fixtures.waiting import wait_until
from tests.web.gates import HeldGate
from tests.web.server import WebServer

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        missing_service("chromium (make bootstrap installs it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    target = ARTIFACTS / name
    page.screenshot(path=str(target), full_page=True)
    print(f"screenshot: {target}")


def bar_widths(page: Page) -> list[float]:
    found: list[float] = page.eval_on_selector_all(
        "[data-pipeline=gate] .bar > span",
        "spans => spans.map(s => parseFloat(s.style.width) || 0)",
    )
    return found


def gate_refs(page: Page) -> list[str]:
    found: list[str] = page.eval_on_selector_all(
        "[data-pipeline=gate] .item .item-head a", "links => links.map(a => a.textContent)"
    )
    return found


def test_the_status_page_follows_a_gate(web: WebServer, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    system = web.system
    gate = HeldGate(system, minimum=4)
    for ref in ("c0", "c1", "c2", "c3"):
        gate.change(ref)
    system.start_worker(concurrency=4)
    system.sluice("reconfigure")
    gate.release()  # one run first: its duration is the estimate the bars use
    system.enqueue("c0", "check")
    system.sluice("wait", "--idle", "--timeout", "120")
    gate.hold()

    page.goto(f"{web.url}/t/demo/status")
    for ref in ("c1", "c2", "c3"):
        system.enqueue(ref, "gate")
    wait_until(lambda: len(gate_refs(page)) == 3, 30, "three gate items on the page", interval=0.2)
    assert gate_refs(page) == ["app c1", "app c2", "app c3"]

    def running() -> bool:
        return any(0 < w < 99 for w in bar_widths(page))

    wait_until(running, 60, "a running job's bar", interval=0.2)
    before = bar_widths(page)
    time.sleep(1.5)
    after = bar_widths(page)
    assert any(b < a for b, a in zip(before, after, strict=False)), (before, after)
    shot(page, "status-gate-running.png")

    # the buildset page (where a forge's status links) shows the live item while it runs
    c1 = web.get("/api/tenant/demo/status")
    (head,) = [i for p in c1["pipelines"] if p["name"] == "gate" for q in p["change_queues"]
               for h in q["heads"] for i in h if i["ref"] == "c1"]  # fmt: skip
    buildset_page = browser.new_page(viewport={"width": 1400, "height": 900})
    buildset_page.goto(f"{web.url}/t/demo/buildset/{head['buildset']}")
    wait_until(lambda: gate_refs(buildset_page) == ["app c1"], 30, "the live item, alone")

    # the build page of c1's running job streams its log
    link = page.locator("[data-pipeline=gate] .item").first.locator(".job a")
    build_url = link.get_attribute("href")
    assert build_url
    log_page = browser.new_page(viewport={"width": 1400, "height": 900})
    log_page.goto(web.url + build_url)
    wait_until(lambda: "unit starts" in log_page.inner_text("#log"), 30, "the live log")
    shot(log_page, "build-log-running.png")

    gate.release()
    wait_until(lambda: gate_refs(page)[:1] != ["app c1"], 60, "c1 left the page", interval=0.2)
    wait_until(lambda: gate_refs(page) == [], 90, "the gate empty on the page", interval=0.3)
    shot(page, "status-gate-done.png")
    wait_until(
        lambda: log_page.get_attribute("#log", "data-complete") == "SUCCESS",
        30,
        "the log stream ended with the build's result",
    )
    system.sluice("wait", "--idle", "--timeout", "60")

    # reported: the buildset page shows the record and links each build
    buildset_page.goto(f"{web.url}/t/demo/buildset/{head['buildset']}")
    buildset_page.wait_for_selector("table.builds a")
    assert "SUCCESS" in buildset_page.inner_text("table.buildset")
    # a passed item has no reason; the row is there (a failure's shows its kind and message)
    assert "Reason" in buildset_page.inner_text("table.buildset")
    assert buildset_page.inner_text("table.builds a") == "unit"
    shot(buildset_page, "buildset-reported.png")


def test_the_status_page_shows_a_pre_failed_job(web: WebServer, browser: Browser) -> None:
    """A job whose output matched its failure-output is shown failing while it runs."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    system = web.system
    go = system.root / "go"
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", GATE_CONFIG)
    base = system.repos.commit("app", "main", prefail_app(str(go)))
    system.repos.git("app", "checkout", "-q", "--detach")
    system.repos.commit("app", "c1", {"FAIL": "x\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_worker(concurrency=2)
    system.sluice("reconfigure")
    page.goto(f"{web.url}/t/demo/status")
    system.enqueue("c1", "gate")

    job = "[data-pipeline=gate] .item.failing li.job.pre-fail[data-job=unit]"
    page.wait_for_selector(job, timeout=90_000)
    assert "failing" in page.inner_text(f"{job} .bar")
    shot(page, "status-gate-pre-fail.png")
    go.touch()
    system.sluice("wait", "--idle", "--timeout", "120")
