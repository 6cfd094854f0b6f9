// The dashboard: asks for a client token when the server wants one, shows the view the URL's
// hash names, and refreshes it every two seconds.

import { api, ApiError, token } from "./api.js";
import { h } from "./dom.js";
import { jobView } from "./job.js";
import { jobsView } from "./jobs.js";
import { queueView } from "./queue.js";
import { workersView } from "./workers.js";

const REFRESH_MS = 2000;
const $ = (id) => document.getElementById(id);
// "none" on a server without auth, which needs no token ("bearer" otherwise).
const AUTH = document.querySelector('meta[name="autosched-auth"]').content;

let view = null;
let timer = null;
let generation = 0; // the newest refresh: only it schedules the next one

function route() {
  const [, page, id] = location.hash.split("/");
  if (page === "jobs" && /^\d+$/.test(id || "")) return jobView(Number(id), rerun);
  if (page === "workers") return workersView();
  if (page === "queue") return queueView();
  return jobsView(rerun);
}

/** Why the server refused the token, in one line. */
function refusal(error) {
  if (error && error.status === 403) {
    return "This is a worker token: the dashboard needs a client token.";
  }
  if (token.get()) return "This token was refused: it is unknown or revoked.";
  return "";
}

function askForToken(error) {
  clearTimeout(timer);
  view = null;
  $("view").replaceChildren();
  document.querySelector("nav").hidden = true;
  $("forget").hidden = true;
  $("login-error").textContent = refusal(error);
  if (error) token.forget(); // refused: a reload asks again rather than sending it again
  $("login").hidden = false;
  $("login").elements.token.focus();
}

function fail(error) {
  if (error instanceof ApiError && error.unauthorized) return askForToken(error);
  $("problem").textContent = `The server answered: ${error.message}`;
  $("problem").hidden = false;
}

async function refresh() {
  clearTimeout(timer);
  const mine = ++generation;
  const shown = view;
  try {
    await shown.refresh();
    $("problem").hidden = true;
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    fail(error);
  }
  if (mine === generation && view === shown) timer = setTimeout(refresh, REFRESH_MS);
}

/** What a view calls on a user's action: run it (if any), then show the outcome at once. */
async function rerun(action) {
  try {
    if (action) await action();
  } catch (error) {
    return fail(error);
  }
  if (view) refresh();
}

function show() {
  view = route();
  const here = location.hash || "#/jobs";
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("current", here.startsWith(link.getAttribute("href")));
  }
  $("view").replaceChildren(view.element);
  refresh();
}

async function start() {
  if (AUTH !== "none" && !token.get()) return askForToken(null);
  try {
    await api("/jobs", { query: { limit: 1 } }); // is the token good?
  } catch (error) {
    if (error instanceof ApiError && error.unauthorized) return askForToken(error);
    const problem = h("p", { class: "error" }, `The server did not answer: ${error.message}`);
    $("view").replaceChildren(problem);
    return;
  }
  $("login").hidden = true;
  document.querySelector("nav").hidden = false;
  $("forget").hidden = !token.get();
  show();
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  token.set($("login").elements.token.value.trim());
  $("login").reset();
  start();
});
$("forget").addEventListener("click", () => {
  token.forget();
  askForToken(null);
});
window.addEventListener("hashchange", () => view && show());
start();
