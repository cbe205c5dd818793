// Sluice's pages: plain JavaScript, no build step. Every page reads the REST API;
// the status follows server-sent events, a build's log streams as it grows.
"use strict";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const live = document.getElementById("live");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function getJSON(url) {
  const response = await fetch(url);
  if (!response.ok) {
    let text = response.statusText;
    try { text = (await response.json()).description; } catch (e) { /* not JSON */ }
    throw new Error(text);
  }
  return response.json();
}

function show(...nodes) { main.replaceChildren(...nodes); }
function problem(error) { show(el("p", { class: "r-FAILURE" }, String(error.message || error))); }
function seconds(ms) {
  if (ms === null || ms === undefined) return "";
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}
const enc = encodeURIComponent;

// -- tenants ---------------------------------------------------------------------

async function tenantsPage() {
  nav.replaceChildren();
  const tenants = await getJSON("/api/tenants");
  show(el("h1", {}, "Tenants"), el("table", {},
    el("tr", {}, el("th", {}, "Tenant"), el("th", {}, "Projects"), el("th", {}, "Queued")),
    tenants.map((t) => el("tr", {},
      el("td", {}, el("a", { href: `/t/${enc(t.name)}/status` }, t.name)),
      el("td", {}, t.projects), el("td", {}, t.queue)))));
}

// -- status ------------------------------------------------------------------------

let received = 0;   // when the last status arrived (ms): bars advance from there

function progress(job) {
  const bar = el("div", { class: "bar" });
  const fill = el("span", {});
  const label = el("em", {});
  bar.append(fill, label);
  const update = () => {
    if (job.result) {
      fill.style.width = "100%";
      fill.style.background = job.result === "SUCCESS" ? "#5cb85c" : "#d9534f";
      label.textContent = job.result;
      return;
    }
    if (job.state !== "running" && job.state !== "paused") {
      fill.style.width = "0";
      label.textContent = job.state.replaceAll("_", " ");
      return;
    }
    const elapsed = (job.elapsed_time || 0) + (Date.now() - received);
    const estimate = (job.estimated_time || 0) * 1000;
    const share = estimate ? Math.min(0.99, elapsed / estimate) : 0.5;
    fill.style.width = `${(share * 100).toFixed(1)}%`;
    // pre_fail: its output matched the job's failure-output; it fails, still running
    if (job.pre_fail) fill.style.background = "#d9534f";
    const time = estimate ? `${seconds(Math.max(0, estimate - elapsed))} left` : seconds(elapsed);
    label.textContent = job.pre_fail ? `failing, ${time}` : time;
  };
  update();
  bar.dataset.running = job.result ? "" : "1";
  bar.update = update;
  return bar;
}

// Why the item fails or left, and what resets cost (scheduler/views/status.py)
function reasonText(reason) {
  return reason ? `${reason.kind}: ${reason.message}` : "";
}

function resetsText(resets, cost) {
  const parts = [];
  if (resets && resets.count) {
    const cause = resets.cause && resets.cause.ref ? `, last by ${resets.cause.ref} (${resets.cause.kind})` : "";
    parts.push(`reset ${resets.count}x: ${resets.builds} builds, ${Math.round(resets.ci_seconds)} CI s lost${cause}`);
  }
  if (cost && cost.resets) {
    parts.push(`cost others ${cost.resets} resets: ${cost.builds} builds, ${Math.round(cost.ci_seconds)} CI s`);
  }
  return parts.join("; ");
}

function itemNode(tenant, item) {
  const failing = (item.failing_reasons || []).length > 0
    || item.jobs.some((j) => j.voting && ((j.result && j.result !== "SUCCESS") || j.pre_fail));
  const why = reasonText(item.dequeue_reason);
  const resets = resetsText(item.resets, item.reset_cost);
  return el("div", { class: failing ? "item failing" : "item", "data-item": item.id },
    el("div", { class: "item-head" },
      el("a", { href: `/t/${enc(tenant)}/change/${enc(item.ref)}` }, `${item.project} ${item.ref}`),
      el("span", { class: "muted" }, item.branch)),
    why ? el("div", { class: "item-reason", "data-reason": item.dequeue_reason.kind }, why) : null,
    resets ? el("div", { class: "item-resets muted" }, resets) : null,
    el("ul", { class: "jobs" }, item.jobs.map((job) => el("li", { class: job.pre_fail ? "job pre-fail" : "job", "data-job": job.name },
      job.uuid
        ? el("a", { href: `/t/${enc(tenant)}/build/${enc(job.uuid)}`, class: job.result ? `r-${job.result}` : "" }, job.name)
        : el("span", {}, job.name),
      progress(job)))));
}

function pipelineNode(tenant, pipeline, only) {
  const queues = pipeline.change_queues
    .map((queue) => ({ queue, items: queue.heads.flat().filter((i) => !only || [i.ref, i.id, i.buildset].includes(only)) }))
    .filter((q) => q.items.length);
  const count = queues.reduce((n, q) => n + q.items.length, 0);
  return el("section", { class: "pipeline", "data-pipeline": pipeline.name },
    el("h2", {}, pipeline.name, " ", el("span", { class: "count" }, `(${count})`)),
    pipeline.description ? el("p", { class: "muted" }, pipeline.description) : null,
    queues.map(({ queue, items }) => el("div", { class: "queue" },
      el("div", { class: "queue-name" }, queue.name),
      items.map((item) => itemNode(tenant, item)))));
}

function statusPage(tenant, only) {
  nav.replaceChildren(
    el("a", { href: `/t/${enc(tenant)}/status` }, "Status"),
    el("a", { href: `/t/${enc(tenant)}/builds` }, "Builds"));
  show(el("p", { class: "muted" }, "Waiting for the status…"));
  const source = new EventSource(`/api/tenant/${enc(tenant)}/status/events`);
  source.addEventListener("open", () => live.classList.add("on"));
  source.addEventListener("error", () => live.classList.remove("on"));
  source.addEventListener("problem", (event) => problem(new Error(JSON.parse(event.data).error)));
  source.addEventListener("status", (event) => {
    const status = JSON.parse(event.data);
    received = Date.now();
    const title = only ? `Change ${only}` : `Status of ${tenant}`;
    show(el("h1", {}, title),
      el("div", { class: "pipelines" }, status.pipelines.map((p) => pipelineNode(tenant, p, only))));
  });
}
setInterval(() => document.querySelectorAll(".bar[data-running='1']").forEach((b) => b.update()), 1000);

// -- history ------------------------------------------------------------------------

async function buildsPage(tenant) {
  nav.replaceChildren(
    el("a", { href: `/t/${enc(tenant)}/status` }, "Status"),
    el("a", { href: `/t/${enc(tenant)}/builds` }, "Builds"));
  const builds = await getJSON(`/api/tenant/${enc(tenant)}/builds?limit=100`);
  show(el("h1", {}, "Builds"), el("table", {},
    el("tr", {}, ["Job", "Project", "Ref", "Pipeline", "Result", "Duration", "Start"].map((h) => el("th", {}, h))),
    builds.map((b) => el("tr", {},
      el("td", {}, el("a", { href: `/t/${enc(tenant)}/build/${enc(b.uuid)}` }, b.job_name)),
      el("td", {}, b.project), el("td", {}, b.ref), el("td", {}, b.pipeline),
      el("td", { class: `r-${b.result}` }, b.result || "running"),
      el("td", {}, b.duration === null ? "" : `${Math.round(b.duration)}s`),
      el("td", {}, b.start_time || "")))));
}

async function buildPage(tenant, uuid) {
  nav.replaceChildren(
    el("a", { href: `/t/${enc(tenant)}/status` }, "Status"),
    el("a", { href: `/t/${enc(tenant)}/builds` }, "Builds"));
  const build = await getJSON(`/api/tenant/${enc(tenant)}/build/${enc(uuid)}`);
  const log = el("pre", { class: "log", id: "log" });
  const rows = [["Job", build.job_name], ["Project", build.project], ["Branch", build.branch],
    ["Ref", build.ref], ["Pipeline", build.pipeline], ["Attempt", build.attempt],
    ["Result", build.result || "running"], ["Start", build.start_time], ["End", build.end_time],
    ["Buildset", build.buildset.uuid]];
  show(el("h1", {}, `Build ${build.job_name}`),
    el("table", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { class: k === "Result" ? `r-${v}` : "" }, v ?? "")))),
    el("h2", {}, "Log"), log);
  const source = new EventSource(`/api/tenant/${enc(tenant)}/build/${enc(uuid)}/log/stream`);
  source.addEventListener("open", () => live.classList.add("on"));
  source.addEventListener("log", (event) => {
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.append(JSON.parse(event.data).text);
    if (atEnd) log.scrollTop = log.scrollHeight;
  });
  source.addEventListener("end", (event) => {
    source.close();
    live.classList.remove("on");
    log.dataset.complete = JSON.parse(event.data).result || "";
  });
}

async function buildsetPage(tenant, uuid) {
  nav.replaceChildren(
    el("a", { href: `/t/${enc(tenant)}/status` }, "Status"),
    el("a", { href: `/t/${enc(tenant)}/builds` }, "Builds"));
  let buildset;
  try {
    buildset = await getJSON(`/api/tenant/${enc(tenant)}/buildset/${enc(uuid)}`);
  } catch (error) {
    return statusPage(tenant, uuid);  // not reported yet: the live item, as the status shows it
  }
  const rows = [["Project", buildset.project], ["Branch", buildset.branch], ["Ref", buildset.ref],
    ["Pipeline", buildset.pipeline], ["Result", buildset.result], ["Message", buildset.message],
    ["Reason", reasonText(buildset.reason)], ["Resets", resetsText(buildset.resets, buildset.reset_cost)],
    ["Start", buildset.first_build_start_time], ["End", buildset.last_build_end_time]];
  show(el("h1", {}, `Buildset ${uuid}`),
    el("table", { class: "buildset" },
      rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { class: k === "Result" ? `r-${v}` : "" }, v ?? "")))),
    el("h2", {}, "Builds"),
    el("table", { class: "builds" },
      el("tr", {}, ["Job", "Result", "Duration"].map((h) => el("th", {}, h))),
      (buildset.builds || []).map((b) => el("tr", {},
        el("td", {}, el("a", { href: `/t/${enc(tenant)}/build/${enc(b.uuid)}` }, b.job_name)),
        el("td", { class: `r-${b.result}` }, b.result || "running"),
        el("td", {}, b.duration === null ? "" : `${Math.round(b.duration)}s`)))));
}

// -- routing --------------------------------------------------------------------------

async function route() {
  const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "t" && parts.length >= 3) {
      const [, tenant, page, arg] = parts;
      document.title = `Sluice: ${tenant} ${page}`;
      if (page === "status") return statusPage(tenant, null);
      if (page === "change") return statusPage(tenant, parts.slice(3).join("/"));
      if (page === "builds") return await buildsPage(tenant);
      if (page === "build" || page === "stream") return await buildPage(tenant, arg);
      if (page === "buildset") return await buildsetPage(tenant, arg);
    }
    return await tenantsPage();
  } catch (error) {
    problem(error);
  }
}

route();
