// One job: its best-latency curve against trials and wall time, every measurement as a point
// (failures by kind), its finalists timed again with their intervals, the best schedule's
// TVMScript, and a button to cancel it.

import { all, api } from "./api.js";
import { chart } from "./chart.js";
import { facts, h, table } from "./dom.js";
import * as fmt from "./format.js";

const FINAL = new Set(["finished", "interrupted", "failed", "cancelled"]);
const LATENCY = { label: "latency", format: fmt.latency, log: true };

function pointTitle(m) {
  const at = m.trial === null ? "untuned baseline" : `trial ${m.trial}`;
  if (m.error_kind) return `${at}: ${m.error_kind}: ${m.error_msg || ""}`;
  return `${at}: ${fmt.latency(m.median_secs)}${m.verified ? ", verified" : ""}`;
}

function points(measurements, x) {
  return measurements.map((m) => ({
    x: x(m),
    y: m.error_kind ? null : m.median_secs,
    cls: m.error_kind ? `failure kind-${m.error_kind}` : m.verified ? "point verified" : "point",
    title: pointTitle(m),
  }));
}

/** The best verified latency over time: the points where it improved. */
function bestOverTime(measurements, x) {
  const best = [];
  for (const m of measurements) {
    if (!m.verified || m.median_secs === null) continue;
    if (!best.length || m.median_secs < best[best.length - 1].y) {
      best.push({ x: x(m), y: m.median_secs, title: `best ${fmt.latency(m.median_secs)}` });
    }
  }
  return best;
}

function charts(job, measurements) {
  const start = Date.parse(job.started_at || job.created_at);
  const byTrial = (m) => m.trial ?? 0;
  const bySecs = (m) => (Date.parse(m.measured_at) - start) / 1000;
  const curve = job.curve.map((p) => ({
    x: p.trials,
    y: p.best_latency_secs,
    title: `best after ${p.trials} trials: ${fmt.latency(p.best_latency_secs)}`,
  }));
  const timed = measurements.filter((m) => m.measured_at);
  const seconds = { label: "seconds since the job started", format: fmt.duration, zero: true };
  return [
    chart({
      name: "trials",
      x: { label: "trials", format: String, zero: true, integer: true },
      y: LATENCY,
      series: [
        { cls: "measurements", points: points(measurements, byTrial) },
        { cls: "best", step: true, points: curve },
      ],
      empty: "No measurements yet",
    }),
    chart({
      name: "time",
      x: seconds,
      y: LATENCY,
      series: [
        { cls: "measurements", points: points(timed, bySecs) },
        { cls: "best", step: true, points: bestOverTime(timed, bySecs) },
      ],
      empty: "No measurements yet",
    }),
  ];
}

function legend(measurements) {
  const kinds = [...new Set(measurements.map((m) => m.error_kind).filter(Boolean))];
  return h(
    "p",
    { class: "legend" },
    h("span", { class: "key best" }, "best so far"),
    h("span", { class: "key verified" }, "verified"),
    h("span", { class: "key point" }, "measured"),
    kinds.map((kind) => h("span", { class: `key failure kind-${kind}` }, `failed: ${kind}`)),
  );
}

function failures(measurements) {
  const failed = measurements.filter((m) => m.error_kind);
  return table(
    ["Trial", "Kind", "Message"],
    failed.map((m) =>
      h(
        "tr",
        {},
        h("td", { class: "num" }, m.trial ?? "baseline"),
        h("td", {}, h("span", { class: `kind kind-${m.error_kind}` }, m.error_kind)),
        h("td", {}, h("pre", { class: "message" }, m.error_msg || "")),
      ),
    ),
    "No failed measurements.",
  );
}

function finalists(job) {
  const ranked = job.finalists || [];
  const rows = table(
    ["Rank", "Program", "Single shot", "Re-timed median", "Interval", "Samples"],
    ranked.map((f, index) =>
      h(
        "tr",
        { class: f.tie && index > 0 ? "tie" : "" },
        h("td", { class: "num" }, index + 1, f.tie && index > 0 ? " (tie)" : ""),
        h("td", {}, f.untuned ? "untuned" : h("code", {}, f.program_hash.slice(0, 12))),
        h("td", { class: "num" }, fmt.latency(f.first_median_secs)),
        h("td", { class: "num" }, fmt.latency(f.median_secs)),
        h(
          "td",
          { class: "num" },
          `${fmt.latency(f.interval_secs[0])} – ${fmt.latency(f.interval_secs[1])}`,
          ` (${Math.round(f.confidence * 100)}%)`,
        ),
        h("td", { class: "num" }, f.samples.length),
      ),
    ),
    finalState(job.final),
  );
  return h("div", { class: "finalists" }, rows);
}

// What stands in for the finalists until a worker has timed them again.
function finalState(final) {
  if (!final) return "Not timed again: the job has no final.";
  const entrants = `its ${final.finalists} fastest candidates and the untuned program`;
  switch (final.state) {
    case "pending":
      return `Once its trials are measured, ${entrants} are timed again, ${final.rounds} rounds.`;
    case "queued":
      return `Waiting for a worker to time ${entrants} again.`;
    case "leased":
      return `A worker is timing ${entrants} again.`;
    default:
      return `Not timed again: ${final.reason || final.state}.`;
  }
}

function copyButton(code) {
  const button = h("button", { type: "button", class: "copy" }, "Copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(code.textContent);
      button.textContent = "Copied";
    } catch {
      getSelection().selectAllChildren(code); // no clipboard here: select it for Ctrl+C
      button.textContent = "Selected: press Ctrl+C";
    }
  });
  return button;
}

function schedule(best) {
  if (!best) return h("p", { class: "muted" }, "No verified schedule yet.");
  const code = h("code", {}, best.tvmscript);
  return h(
    "div",
    { class: "schedule" },
    h(
      "p",
      {},
      `${fmt.latency(best.record.median_secs)}, candidate ${best.record.candidate_id} `,
      copyButton(code),
    ),
    h("pre", { class: "tvmscript" }, code),
  );
}

function summary(job, models) {
  const seed = job.seed === null ? "" : `, seed ${job.seed}`;
  return facts([
    ["Target", fmt.target(job.target)],
    ["Status", job.status + (job.stop_reason ? `: ${job.stop_reason}` : "")],
    ["Trials", `${job.trials_done} of ${job.trials}, ${job.failed} failed`],
    ["Best", fmt.latency(job.best_latency_secs)],
    ["Untuned", fmt.latency(job.baseline_latency_secs)],
    ["Speedup", fmt.speedup(job.baseline_latency_secs, job.best_latency_secs)],
    ["Strategy", `${job.strategy}, batches of ${job.batch_size}${seed}`],
    ["Cost model", job.cost_model_id === null ? "cold" : models.get(job.cost_model_id) || "—"],
    ["Submitted", fmt.clock(job.created_at)],
    ["Finished", fmt.clock(job.finished_at)],
  ]);
}

export function jobView(jobId, rerun) {
  const element = h("section", { id: "job" }, h("p", { class: "muted" }, "Loading…"));
  let measurements = [];
  let best = null;
  let bestLatency;
  const models = new Map(); // cost model versions by id, as "family vN"
  let shown = ""; // what the page shows, to leave it (and a selection in it) alone if unchanged

  function cancel(event) {
    event.target.disabled = true;
    rerun(() => api(`/jobs/${jobId}/cancel`, { method: "POST" }));
  }

  async function refresh() {
    const [job, latest] = await Promise.all([
      api(`/jobs/${jobId}`),
      api(`/jobs/${jobId}/measurements`, { query: { limit: 1 } }),
    ]);
    if (latest.count !== measurements.length) {
      measurements = await all(`/jobs/${jobId}/measurements`);
    }
    if (job.best_latency_secs !== bestLatency) {
      // A best latency means a verified schedule: the page never asks for one that is not there.
      best = job.best_latency_secs === null ? null : await api(`/jobs/${jobId}/best`);
      bestLatency = job.best_latency_secs;
    }
    if (job.cost_model_id !== null && !models.has(job.cost_model_id)) {
      const versions = (await api("/cost-models")).data;
      for (const m of versions) models.set(m.id, `${m.family} v${m.version}`);
    }
    const state = JSON.stringify([job, measurements.length, best && best.record.candidate_id]);
    if (state === shown) return;
    shown = state;
    element.replaceChildren(
      h(
        "h2",
        {},
        `Job #${job.id}: `,
        h("span", { class: "workload" }, fmt.workload(job.workload)),
        " ",
        h("span", { class: `status ${job.status}` }, job.status),
        " ",
        h(
          "button",
          { type: "button", class: "cancel", disabled: FINAL.has(job.status), onclick: cancel },
          "Cancel job",
        ),
      ),
      summary(job, models),
      h("h3", {}, "Best latency against trials and against wall time"),
      legend(measurements),
      h("div", { class: "charts" }, charts(job, measurements)),
      h("h3", {}, "Finalists timed again side by side (a tie overlaps the winner's interval)"),
      finalists(job),
      h("h3", {}, "Best schedule"),
      schedule(best),
      h("h3", {}, "Failed measurements"),
      failures(measurements),
    );
  }

  return { element, refresh };
}
