// The workers: target, device, last heartbeat (stale ones greyed), lease in hand, results.

import { api } from "./api.js";
import { h, table } from "./dom.js";
import * as fmt from "./format.js";

const COLUMNS = [
  "Name", "Target", "Device", "Last heartbeat", "State", "Lease in hand", "Results/min (device)",
];

function row(worker) {
  const heard = fmt.clock(worker.heartbeat_at);
  const lease = worker.lease_id === null ? "—" : `#${worker.lease_id}: ${worker.leased} candidates`;
  return h(
    "tr",
    { class: worker.alive ? "alive" : "stale", dataset: { workerId: worker.id } },
    h("td", { class: "name" }, worker.name),
    h("td", {}, fmt.target(worker.target)),
    h("td", {}, fmt.device(worker.fingerprint)),
    h("td", { class: "num", title: heard }, `${fmt.age(worker.heartbeat_at)} ago`),
    h("td", {}, worker.alive ? "alive" : "stale"),
    h("td", {}, lease),
    h("td", { class: "num" }, worker.results_per_minute),
  );
}

export function workersView() {
  const holder = h("div");
  const element = h("section", { id: "workers" }, h("h2", {}, "Workers"), holder);

  async function refresh() {
    const workers = await api("/workers", { query: { limit: 200 } });
    holder.replaceChildren(
      table(
        COLUMNS,
        workers.data.map(row),
        "No worker has registered: start one with `autosched worker --server URL`.",
      ),
    );
  }

  return { element, refresh };
}
