// The queue per target, the service's throughput, and the shared cost models: their versions and
// leave-workload-out scores over time.

import { api } from "./api.js";
import { chart } from "./chart.js";
import { facts, h, table } from "./dom.js";
import * as fmt from "./format.js";

const SCORE = (t) => t.toFixed(2);
const MODEL_COLUMNS = [
  "Family", "Version", "Objective", "Trained", "Measurements",
  "Workloads", "Pairwise", "Top-1", "Top-5",
];

function score(model, name) {
  const shared = model.scores && model.scores.shared;
  return shared && typeof shared[name] === "number" ? shared[name] : null;
}

function queueTable(queue) {
  return table(
    ["Target", "Queued", "Leased", "Live workers"],
    queue.targets.map((t) =>
      h(
        "tr",
        { dataset: { target: t.target.key } },
        h("td", {}, fmt.target(t.target)),
        h("td", { class: "num queued" }, t.queued),
        h("td", { class: "num" }, t.leased),
        h("td", { class: "num" }, t.workers_alive),
      ),
    ),
    "Nothing queued and no live worker.",
  );
}

function totals(queue) {
  const jobs = Object.entries(queue.jobs_by_status)
    .filter(([, n]) => n)
    .map(([status, n]) => `${n} ${status}`)
    .join(", ");
  return facts([
    ["Results per second", queue.results_per_second.toFixed(2)],
    ["Queued", queue.queued],
    ["Leased", `${queue.leased} in ${queue.active_leases} leases`],
    ["Live workers", queue.workers_alive],
    ["Jobs", jobs || "none"],
  ]);
}

function modelTable(models) {
  const cell = (model, name) => {
    const value = score(model, name);
    return h("td", { class: "num" }, value === null ? "—" : SCORE(value));
  };
  return table(
    MODEL_COLUMNS,
    models.map((m) =>
      h(
        "tr",
        {},
        h("td", {}, m.family),
        h("td", { class: "num" }, `v${m.version}`),
        h("td", {}, m.objective),
        h("td", {}, fmt.clock(m.created_at)),
        h("td", { class: "num" }, m.trained_on),
        h("td", { class: "num" }, m.workloads),
        cell(m, "pairwise"),
        cell(m, "top1"),
        cell(m, "top5"),
      ),
    ),
    "No cost model version yet: the trainer makes one once a family has enough measurements.",
  );
}

function scoreCharts(models) {
  const families = [...new Set(models.map((m) => m.family))];
  return families.map((family) => {
    const versions = models.filter((m) => m.family === family && score(m, "pairwise") !== null);
    const first = Math.min(...versions.map((m) => Date.parse(m.created_at)));
    const since = (m) => (Date.parse(m.created_at) - first) / 1000;
    const series = ["pairwise", "top1", "top5"].map((name) => ({
      cls: `score-${name}`,
      step: false,
      points: versions.map((m) => ({
        x: since(m),
        y: score(m, name),
        title: `v${m.version}: ${name} ${SCORE(score(m, name))}`,
      })),
    }));
    return h(
      "figure",
      {},
      chart({
        name: `scores ${family}`,
        x: { label: "time since the first scored version", format: fmt.duration },
        y: { label: "score", format: SCORE },
        series,
        empty: "No scored version yet",
      }),
      h(
        "figcaption",
        { class: "legend" },
        `${family}, the shared model held out workload by workload:`,
        h("span", { class: "key score-pairwise" }, "pairwise rank accuracy"),
        h("span", { class: "key score-top1" }, "top-1"),
        h("span", { class: "key score-top5" }, "top-5"),
      ),
    );
  });
}

export function queueView() {
  const holder = h("div");
  const element = h("section", { id: "queue" }, h("h2", {}, "Queue and learning"), holder);

  async function refresh() {
    const [queue, models] = await Promise.all([api("/queue"), api("/cost-models")]);
    holder.replaceChildren(
      totals(queue),
      h("h3", {}, "Queue per target"),
      queueTable(queue),
      h("h3", {}, "Cost models"),
      h("div", { class: "charts" }, scoreCharts(models.data)),
      modelTable(models.data),
    );
  }

  return { element, refresh };
}
