// How numbers, times and the log's objects read on the page.

export function latency(secs) {
  if (secs === null || secs === undefined) return "—";
  if (secs < 1e-3) return `${(secs * 1e6).toPrecision(3)} µs`;
  if (secs < 1) return `${(secs * 1e3).toPrecision(3)} ms`;
  return `${secs.toPrecision(3)} s`;
}

export function speedup(baseline, best) {
  return baseline && best ? `${(baseline / best).toFixed(baseline / best < 10 ? 2 : 1)}×` : "—";
}

export function duration(secs) {
  if (secs > 0 && secs < 1) return `${Math.round(secs * 1000)} ms`;
  if (secs < 10) return `${Math.max(0, Number(secs.toFixed(1)))} s`;
  if (secs < 60) return `${Math.round(secs)} s`;
  if (secs < 3600) return `${Math.round(secs / 60)} min`;
  if (secs < 86400) return `${(secs / 3600).toFixed(1)} h`;
  return `${(secs / 86400).toFixed(1)} d`;
}

export function age(iso, now = Date.now()) {
  return iso ? duration((now - Date.parse(iso)) / 1000) : "—";
}

export function clock(iso) {
  return iso ? new Date(iso).toLocaleString() : "—";
}

export function workload(w) {
  const params = Object.entries(w.params).map(([key, value]) => `${key}=${value}`);
  return params.length ? `${w.name}(${params.join(", ")})` : w.name;
}

export function target(t) {
  const json = t.target_json;
  const processor = json.mcpu || json.arch;
  return processor ? `${t.kind} ${processor}` : t.kind;
}

export function device(fingerprint) {
  const name = fingerprint.gpu_name || fingerprint.cpu_model || fingerprint.kind || "?";
  return fingerprint.hostname ? `${name} on ${fingerprint.hostname}` : name;
}
