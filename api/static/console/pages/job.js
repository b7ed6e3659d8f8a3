// One job: its definition (editable with If-Match), its next 10 fires, and a timeline of its runs.
import { call, get, idempotencyKey } from "../api.js";
import { scheduleWords } from "../describe.js";
import { badge, clear, h, offsetOf, relative, say, wallClock, when } from "../ui.js";
import { deleteJob, setState } from "./actions.js";

const SERVER_FIELDS = ["id", "state", "version", "next_run_at", "next_run_id", "fired_count", "created_at", "updated_at", "last_run"];

export async function jobPage(view, { parts, navigate }) {
  const id = parts[1];
  const [{ data: job }, { data: preview }, { data: runs }] = await Promise.all([
    get(`/v1/jobs/${id}`),
    get(`/v1/jobs/${id}/preview?count=10`).catch(() => ({ data: { fires: [] } })),
    get(`/v1/jobs/${id}/runs?limit=60`),
  ]);
  const refresh = () => navigate(location.hash);
  const zone = job.schedule.type === "cron" ? job.schedule.tz || "UTC" : "UTC";

  view.append(
    h("p", { class: "small" }, h("a", { href: "#/jobs" }, "← Jobs")),
    h("h1", {}, job.name || "Job ", h("span", { class: "mono small muted" }, ` ${job.id}`)),
    h("div", { class: "toolbar" },
      badge(job.state),
      job.state !== "DELETED" && h("button", { type: "button", onclick: async () => { if (await setState(job, job.state === "PAUSED" ? "ACTIVE" : "PAUSED")) refresh(); } },
        job.state === "PAUSED" ? "Resume" : "Pause"),
      job.state !== "DELETED" && h("button", { type: "button", class: "danger", onclick: async () => { if (await deleteJob(job)) navigate("#/jobs"); } }, "Delete"),
      h("button", { type: "button", class: "quiet", onclick: refresh }, "Refresh")),
    h("div", { class: "grid2" }, summary(job), fires(preview.fires, zone)),
    timeline(runs.items),
    editor(job, refresh));
}

function summary(job) {
  const rows = [
    ["Schedule", scheduleWords(job.schedule)],
    ["Next run", job.next_run_at ? `${when(job.next_run_at)} (${relative(job.next_run_at)})` : "—"],
    ["Last run", job.last_run ? [badge(job.last_run.status), ` ${when(job.last_run.scheduled_at)}, attempt ${job.last_run.attempt}`] : "none yet"],
    ["Target", job.target.type === "http" ? `${job.target.method || "POST"} ${job.target.url}` : `Kafka ${job.target.topic}`],
    ["Priority", job.priority || "default"],
    ["Version", String(job.version)],
    ["Fired", String(job.fired_count)],
    ["Labels", Object.entries(job.labels || {}).map(([k, v]) => h("span", { class: "chip" }, `${k}=${v}`))],
  ];
  return h("section", { class: "panel", "aria-labelledby": "def-title" },
    h("h2", { id: "def-title" }, "Definition"),
    h("table", {}, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v))))));
}

function fires(list, zone) {
  const body = list.length
    ? h("table", { "aria-label": "Next fires" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, `Local (${zone})`), h("th", { scope: "col" }, "UTC"), h("th", { scope: "col" }, "DST"))),
      h("tbody", {}, list.map((f, i) => {
        const shifted = i > 0 && offsetOf(f.local) !== offsetOf(list[i - 1].local);
        return h("tr", { class: "fire" },
          h("td", { class: "mono" }, wallClock(f.local)),
          h("td", { class: "mono" }, when(f.at, "UTC")),
          h("td", {}, f.dst ? h("span", { class: "dst", title: dstText(f.dst) }, `⚠ ${f.dst}`) : "",
            shifted ? h("span", { class: "dst" }, ` clocks change: now UTC${offsetOf(f.local)}`) : ""));
      })))
    : h("p", { class: "muted" }, "No fire ahead (the schedule has ended, or the job is not active).");
  return h("section", { class: "panel", "aria-labelledby": "fires-title" }, h("h2", { id: "fires-title" }, "Next 10 fires"), body);
}

function dstText(flag) {
  return {
    shifted: "this local time does not exist (clocks spring forward): the run moves just after the gap",
    repeated: "this local time happens twice (clocks fall back)",
    skipped_sibling: "the other occurrence of a repeated local time is skipped",
    after_skipped_gap: "placed after a gap the schedule skipped",
  }[flag] || flag;
}

function timeline(runs) {
  const section = h("section", { class: "panel", "aria-labelledby": "runs-title" }, h("h2", { id: "runs-title" }, "Runs"));
  if (!runs.length) { section.append(h("p", { class: "muted" }, "No runs yet.")); return section; }
  const times = runs.map((r) => new Date(r.scheduled_at).getTime());
  const lo = Math.min(...times);
  const hi = Math.max(...times);
  const span = Math.max(hi - lo, 60_000);
  const at = (t) => `${2 + ((t - lo) / span) * 96}%`;
  const detail = h("div", { class: "run-detail", "aria-live": "polite" });
  const axis = h("div", { class: "timeline", role: "group", "aria-label": "Runs on a time axis; choose one to see its attempts" });
  for (const [i, run] of runs.entries()) {
    const mark = h("button", {
      type: "button", class: `mark s-${run.status}`, style: `left:${at(times[i])}`, "aria-pressed": "false",
      "aria-label": `Run due ${when(run.scheduled_at)}: ${run.status}, attempt ${run.attempt}`, title: `${when(run.scheduled_at)} ${run.status}`,
    });
    mark.addEventListener("click", () => {
      for (const other of axis.querySelectorAll(".mark")) other.setAttribute("aria-pressed", "false");
      mark.setAttribute("aria-pressed", "true");
      showRun(run.id, detail);
    });
    axis.append(mark);
  }
  const seconds = span < 2 * 3_600_000;
  for (const t of [lo, lo + span / 2, lo + span]) axis.append(h("span", { class: "tick", style: `left:${at(t)}` }, when(new Date(t).toISOString(), undefined, seconds)));
  const legend = h("p", { class: "small" }, ["SUCCEEDED", "RETRY", "RUNNING", "DEAD", "SCHEDULED", "CANCELLED"].map((s) => [badge(s), " "]));
  section.append(axis, legend, detail);
  return section;
}

async function showRun(runId, into) {
  clear(into).append(h("p", { class: "muted" }, "Loading the run…"));
  try {
    const { data: run } = await get(`/v1/runs/${runId}`);
    clear(into).append(
      h("h3", {}, "Run ", h("span", { class: "mono small" }, run.id), " ", badge(run.status)),
      h("p", { class: "small" }, `due ${when(run.scheduled_at)}; ${run.attempt} attempt(s)`, run.last_error ? `; last error: ${run.last_error}` : ""),
      h("div", { class: "table-wrap" }, h("table", { "aria-label": "Attempts" },
        h("thead", {}, h("tr", {}, ["#", "Kind", "Outcome", "Code", "Duration", "Started", "Response excerpt / error"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, run.attempts.map((a) => h("tr", {},
          h("td", { class: "num" }, a.attempt), h("td", {}, a.kind), h("td", {}, a.outcome || "—"),
          h("td", { class: "num" }, a.response_code ?? "—"), h("td", { class: "num" }, duration(a)),
          h("td", {}, when(a.started_at)), h("td", {}, h("code", {}, (a.response_excerpt || a.error || "").slice(0, 300)))))))));
  } catch (err) {
    clear(into).append(h("p", { class: "form-error" }, err.message));
  }
}

function duration(attempt) {
  if (!attempt.started_at || !attempt.finished_at) return "—";
  return `${new Date(attempt.finished_at) - new Date(attempt.started_at)} ms`;
}

function editor(job, refresh) {
  const editable = Object.fromEntries(Object.entries(job).filter(([k]) => !SERVER_FIELDS.includes(k)));
  const text = h("textarea", { id: "edit-json", rows: 14, spellcheck: "false" }, JSON.stringify(editable, null, 2));
  const error = h("div", { class: "form-error", id: "edit-error", role: "alert" });
  const form = h("form", { class: "panel", "aria-labelledby": "edit-title" },
    h("h2", { id: "edit-title" }, "Edit"),
    h("p", { class: "small muted" }, `Sent with If-Match: "${job.version}". If someone changed the job since you opened this page, the API refuses (412) and nothing is overwritten.`),
    h("label", { for: "edit-json" }, "Definition (JSON)"), text, error,
    h("div", { class: "actions" }, h("button", { type: "submit", disabled: job.state === "DELETED" }, "Save changes")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    let body;
    try { body = JSON.parse(text.value); } catch (err) { error.textContent = `Not valid JSON: ${err.message}`; return; }
    try {
      await call("PATCH", `/v1/jobs/${job.id}`, { body, headers: { "If-Match": `"${job.version}"`, "Idempotency-Key": idempotencyKey() } });
      say("Saved.");
      refresh();
    } catch (err) {
      error.textContent = err.status === 412
        ? `Not saved: the job was changed by someone else since you opened it (${err.message}). Reload to see the current version, then edit again.`
        : `Not saved (${err.status}): ${err.message}${err.field ? ` [field: ${err.field}]` : ""}`;
    }
  });
  return form;
}
