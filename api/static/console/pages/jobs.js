// The jobs table: state, schedule in words and zone, next run, last run status, labels; filters; actions; paging.
import { get } from "../api.js";
import { scheduleWords } from "../describe.js";
import { badge, clear, h, relative, when } from "../ui.js";
import { deleteJob, setState } from "./actions.js";

const PAGE = 20;

export async function jobsPage(view, { params, navigate }) {
  const state = params.get("state") || "";
  const label = params.get("label") || "";
  const cursor = params.get("cursor") || "";
  const back = params.getAll("back"); // the cursors of the pages before this one, for "Previous"

  const stateSelect = h("select", { id: "f-state", name: "state" },
    ["", "ACTIVE", "PAUSED"].map((v) => h("option", { value: v, selected: v === state }, v || "any")));
  const labelInput = h("input", { id: "f-label", name: "label", value: label, placeholder: "team=ops", size: 16 });
  const filters = h("form", { class: "filters", role: "search", "aria-label": "Filter jobs" },
    h("div", {}, h("label", { for: "f-state" }, "State"), stateSelect),
    h("div", {}, h("label", { for: "f-label" }, "Label (key=value)"), labelInput),
    h("button", { type: "submit" }, "Filter"));
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = new URLSearchParams();
    if (stateSelect.value) q.set("state", stateSelect.value);
    if (labelInput.value.trim()) q.set("label", labelInput.value.trim());
    navigate(`#/jobs?${q}`);
  });

  const query = new URLSearchParams({ limit: PAGE });
  if (state) query.set("state", state);
  if (label) query.set("label", label);
  if (cursor) query.set("cursor", cursor);
  const { data } = await get(`/v1/jobs?${query}`);

  view.append(h("h1", {}, "Jobs"), filters);
  if (!data.items.length) {
    view.append(h("p", { class: "panel" }, "No jobs match. ", h("a", { href: "#/new" }, "Create one.")));
  } else {
    const rows = data.items.map((job) => jobRow(job, () => navigate(location.hash)));
    view.append(h("div", { class: "table-wrap" }, h("table", { "aria-label": "Jobs" },
      h("thead", {}, h("tr", {}, ["Job", "State", "Schedule", "Next run", "Last run", "Labels", "Actions"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows))));
  }
  view.append(pager(params, data.next_cursor, back, navigate));
}

function jobRow(job, refresh) {
  const last = h("td", { class: "last-run" }, h("span", { class: "muted small" }, "…"));
  // The list holds definitions only; each job's last run comes from its own read, filled in as it arrives.
  get(`/v1/jobs/${job.id}`).then(({ data }) => {
    clear(last).append(data.last_run ? badge(data.last_run.status) : h("span", { class: "muted small" }, "none yet"));
  }).catch(() => clear(last).append("?"));
  const pauseLabel = job.state === "PAUSED" ? "Resume" : "Pause";
  const name = job.name || job.id.slice(0, 8);
  return h("tr", { dataset: { jobId: job.id } },
    h("td", {}, h("a", { href: `#/jobs/${job.id}` }, name), h("div", { class: "muted small mono hide-narrow" }, job.id.slice(0, 8))),
    h("td", {}, badge(job.state)),
    h("td", {}, scheduleWords(job.schedule)),
    h("td", {}, job.next_run_at ? [when(job.next_run_at), h("div", { class: "muted small" }, relative(job.next_run_at))] : "—"),
    last,
    h("td", {}, Object.entries(job.labels || {}).map(([k, v]) => h("span", { class: "chip" }, `${k}=${v}`))),
    h("td", {},
      h("button", { type: "button", class: "quiet", "aria-label": `${pauseLabel} ${name}`,
        onclick: async () => { if (await setState(job, job.state === "PAUSED" ? "ACTIVE" : "PAUSED")) refresh(); } }, pauseLabel),
      " ",
      h("button", { type: "button", class: "quiet", "aria-label": `Delete ${name}`,
        onclick: async () => { if (await deleteJob(job)) refresh(); } }, "Delete")));
}

function pager(params, nextCursor, back, navigate) {
  const nav = h("nav", { class: "toolbar", "aria-label": "Pages of jobs" });
  const base = () => {
    const q = new URLSearchParams();
    for (const name of ["state", "label"]) if (params.get(name)) q.set(name, params.get(name));
    return q;
  };
  const prev = h("button", { type: "button", class: "quiet", disabled: !params.get("cursor") }, "Previous page");
  prev.addEventListener("click", () => {
    const q = base();
    const previous = back.slice(0, -1);
    if (back.length && back[back.length - 1]) q.set("cursor", back[back.length - 1]);
    for (const c of previous) q.append("back", c);
    navigate(`#/jobs?${q}`);
  });
  const next = h("button", { type: "button", class: "quiet", disabled: !nextCursor }, "Next page");
  next.addEventListener("click", () => {
    const q = base();
    q.set("cursor", nextCursor);
    for (const c of [...back, params.get("cursor") || ""]) q.append("back", c);
    navigate(`#/jobs?${q}`);
  });
  nav.append(prev, next);
  return nav;
}
