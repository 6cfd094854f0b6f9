// The jobs: a table with progress, best latency and speedup, filtered by status and target.

import { api } from "./api.js";
import { h, table } from "./dom.js";
import * as fmt from "./format.js";

const COLUMNS = [
  "Job", "Workload", "Target", "Status", "Progress",
  "Best", "Speedup", "Strategy", "Cost model", "Age",
];
const STATUSES = ["queued", "running", "finished", "interrupted", "failed", "cancelled"];

function progress(job) {
  const share = (n) => `${Math.min(100, (100 * n) / job.trials)}%`;
  const done = h("span", { class: "done" });
  const failed = h("span", { class: "failed" });
  done.style.width = share(job.trials_done - job.failed);
  failed.style.width = share(job.failed);
  const text = `${job.trials_done}/${job.trials}` + (job.failed ? `, ${job.failed} failed` : "");
  return h(
    "div",
    {
      class: "progress",
      role: "progressbar",
      "aria-valuemin": 0,
      "aria-valuemax": job.trials,
      "aria-valuenow": job.trials_done,
    },
    h("div", { class: "bar" }, done, failed),
    h("span", { class: "progress-text" }, text),
  );
}

function row(job, versions) {
  const model = job.cost_model_id === null ? "cold" : versions.get(job.cost_model_id) || "—";
  return h(
    "tr",
    { dataset: { jobId: job.id } },
    h("td", {}, h("a", { href: `#/jobs/${job.id}` }, `#${job.id}`)),
    h("td", { class: "workload" }, fmt.workload(job.workload)),
    h("td", {}, fmt.target(job.target)),
    h("td", {}, h("span", { class: `status ${job.status}` }, job.status)),
    h("td", {}, progress(job)),
    h("td", { class: "num best" }, fmt.latency(job.best_latency_secs)),
    h("td", { class: "num" }, fmt.speedup(job.baseline_latency_secs, job.best_latency_secs)),
    h("td", {}, job.strategy),
    h("td", {}, model),
    h("td", { class: "num" }, fmt.age(job.created_at)),
  );
}

function select(label, options, onchange) {
  return h(
    "label",
    {},
    label,
    h(
      "select",
      { onchange },
      options.map(([value, text]) => h("option", { value }, text)),
    ),
  );
}

export function jobsView(rerun) {
  const targets = new Set(); // the keys of every target seen, for the filter
  const status = select("Status ", [["", "any"], ...STATUSES.map((s) => [s, s])], () => rerun());
  const target = select("Target ", [["", "any"]], () => rerun());
  const count = h("span", { class: "muted" });
  const holder = h("div");
  const filters = h("div", { class: "filters" }, status, target, count);
  const element = h("section", { id: "jobs" }, h("h2", {}, "Jobs"), filters, holder);

  function noteTargets(jobs) {
    const choice = target.querySelector("select");
    for (const job of jobs) {
      if (targets.has(job.target.key)) continue;
      targets.add(job.target.key);
      choice.append(h("option", { value: job.target.key }, fmt.target(job.target)));
    }
  }

  async function refresh() {
    const query = {
      limit: 100,
      status: status.querySelector("select").value,
      target: target.querySelector("select").value,
    };
    const [jobs, models] = await Promise.all([
      api("/jobs", { query }),
      api("/cost-models"),
    ]);
    const versions = new Map(models.data.map((m) => [m.id, `${m.family} v${m.version}`]));
    noteTargets(jobs.data);
    count.textContent = `${jobs.count} job${jobs.count === 1 ? "" : "s"}`;
    holder.replaceChildren(
      table(
        COLUMNS,
        jobs.data.map((job) => row(job, versions)),
        "No jobs yet: submit one with `autosched submit` or POST /api/v1/jobs.",
      ),
    );
  }

  return { element, refresh };
}
