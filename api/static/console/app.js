// The console's router: #/jobs, #/jobs/<id>, #/new, #/dead, #/load, #/operator, #/signin.
import { keys, get } from "./api.js";
import { clear, h, say } from "./ui.js";
import { jobsPage } from "./pages/jobs.js";
import { jobPage } from "./pages/job.js";
import { createPage } from "./pages/create.js";
import { deadPage } from "./pages/dead.js";
import { loadPage } from "./pages/load.js";
import { operatorPage } from "./pages/operator.js";
import { signinPage } from "./pages/signin.js";

const view = document.getElementById("view");
let cleanup = null; // a page may return a function that stops its timers when another page opens

function parseHash() {
  const [path, query = ""] = (location.hash.slice(1) || "/jobs").split("?");
  return { parts: path.split("/").filter(Boolean), params: new URLSearchParams(query) };
}

function route(parts) {
  const [first, second] = parts;
  if (first === "signin") return ["signin", signinPage];
  if (first === "operator") return ["operator", operatorPage];
  if (!keys.tenant()) return ["signin", signinPage];
  if (first === "jobs" && second) return ["jobs", jobPage];
  if (first === "new") return ["new", createPage];
  if (first === "dead") return ["dead", deadPage];
  if (first === "load") return ["load", loadPage];
  return ["jobs", jobsPage];
}

async function render() {
  if (cleanup) { cleanup(); cleanup = null; }
  const { parts, params } = parseHash();
  const [name, page] = route(parts);
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.page === name) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  document.getElementById("signout").hidden = !keys.tenant() && !keys.operator();
  clear(view);
  try {
    cleanup = (await page(view, { parts, params, navigate })) || null;
  } catch (err) {
    view.append(h("p", { class: "form-error", role: "alert" }, `This page could not be loaded: ${err.message}`));
    if (err.status === 401 && name !== "operator") { keys.setTenant(""); navigate("#/signin"); }
  }
  // move focus to the new page for keyboard and screen-reader users, unless the page focused a field itself
  if (!view.contains(document.activeElement)) view.focus({ preventScroll: true });
}

export function navigate(hash) {
  if (location.hash === hash) render(); else location.hash = hash;
}

document.getElementById("signout").addEventListener("click", () => {
  keys.clear();
  document.getElementById("who").textContent = "";
  say("Signed out; the keys were removed from this tab.");
  navigate("#/signin");
});

window.addEventListener("hashchange", render);
if (keys.tenant()) get("/v1/jobs?limit=1").catch(() => {}); // warm the connection
render();
