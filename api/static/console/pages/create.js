// Create a job: the API validates (its problem+json `field` puts each error next to its input), and the next
// fires are previewed by the API as the cron expression and zone are typed.
import { idempotencyKey, post } from "../api.js";
import { scheduleWords } from "../describe.js";
import { clear, field, h, say, setFieldError, wallClock } from "../ui.js";

// API field (problem.field, or its first part) -> the input that shows its error
const FIELD_INPUTS = {
  name: "c-name", schedule: "c-type", "schedule.type": "c-type", "schedule.expr": "c-expr", "schedule.tz": "c-tz",
  "schedule.runAt": "c-runat", "schedule.everyS": "c-every", "schedule.anchorAt": "c-every", target: "c-url",
  "target.url": "c-url", "target.method": "c-method", payload: "c-payload", payloadBase64: "c-payload",
  priority: "c-priority", labels: "c-labels", retryPolicy: "c-attempts", "retryPolicy.maxAttempts": "c-attempts",
};
const ALL_INPUTS = [...new Set(Object.values(FIELD_INPUTS))];

function zones() {
  try { return Intl.supportedValuesOf("timeZone"); } catch { return ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]; }
}

export async function createPage(view, { navigate }) {
  const c = {
    name: h("input", { autocomplete: "off" }),
    type: h("select", {}, [["cron", "Cron expression in a time zone"], ["once", "Once"], ["interval", "Every N seconds"]].map(([v, t]) => h("option", { value: v }, t))),
    expr: h("input", { value: "30 9 * * 1-5", spellcheck: "false", class: "mono" }),
    tz: h("input", { value: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC", list: "zones", spellcheck: "false" }),
    runAt: h("input", { type: "datetime-local", step: 1 }),
    every: h("input", { type: "number", min: 1, value: 300 }),
    url: h("input", { type: "url", placeholder: "https://example.com/hook", spellcheck: "false" }),
    method: h("select", {}, ["POST", "GET", "PUT", "PATCH", "DELETE"].map((m) => h("option", { value: m }, m))),
    payload: h("textarea", { rows: 4, spellcheck: "false" }, '{"hello": "world"}'),
    priority: h("select", {}, ["default", "urgent", "bulk"].map((p) => h("option", { value: p }, p))),
    labels: h("input", { placeholder: "team=ops, env=prod", spellcheck: "false" }),
    attempts: h("input", { type: "number", min: 1, max: 100, value: 5 }),
  };
  const scheduleFields = {
    cron: [field("c-expr", "Cron expression", c.expr, "minute hour day-of-month month day-of-week"), field("c-tz", "Time zone (IANA)", c.tz)],
    once: [field("c-runat", "Run at (your browser's local time)", c.runAt)],
    interval: [field("c-every", "Every (seconds)", c.every)],
  };
  const scheduleBox = h("div", {});
  const words = h("p", { class: "small", id: "c-words" });
  const previewBox = h("div", { id: "c-preview", "aria-live": "polite" });
  const formError = h("div", { class: "form-error", role: "alert", id: "c-form-error" });
  const form = h("form", { "aria-labelledby": "new-title", novalidate: true },
    h("div", { class: "grid2" },
      h("section", { class: "panel" },
        h("h2", {}, "What and when"),
        field("c-name", "Name (optional)", c.name),
        field("c-type", "Schedule", c.type), scheduleBox, words,
        field("c-url", "Target URL", c.url), field("c-method", "HTTP method", c.method),
        field("c-payload", "Payload (JSON)", c.payload),
        field("c-priority", "Lane", c.priority),
        field("c-labels", "Labels (key=value, comma separated)", c.labels),
        field("c-attempts", "Attempts before a dead letter", c.attempts),
        formError,
        h("button", { type: "submit" }, "Create job")),
      h("section", { class: "panel", "aria-labelledby": "pv-title" }, h("h2", { id: "pv-title" }, "Next fires (live preview)"), previewBox)),
    h("datalist", { id: "zones" }, zones().map((z) => h("option", { value: z }))));

  const showSchedule = () => {
    clear(scheduleBox).append(...scheduleFields[c.type.value]);
    schedulePreview();
  };
  let timer = null;
  let asked = 0;
  const schedulePreview = () => { clearTimeout(timer); timer = setTimeout(runPreview, 300); };
  async function runPreview() {
    const mine = ++asked;
    const schedule = scheduleOf(c);
    words.textContent = schedule ? `In words: ${scheduleWords(schedule)}` : "";
    for (const id of ["c-expr", "c-tz", "c-runat", "c-every"]) setFieldError(id, "");
    if (!schedule) { clear(previewBox); return; }
    try {
      const { data } = await post("/v1/schedules/preview", { schedule, count: 10 });
      if (mine !== asked) return; // a newer keystroke's answer wins
      clear(previewBox).append(data.fires.length
        ? h("ol", { class: "mono small" }, data.fires.map((f) => h("li", {}, wallClock(f.local), f.dst ? h("span", { class: "dst" }, ` ⚠ DST ${f.dst}`) : "")))
        : h("p", { class: "muted" }, "This schedule never fires from now on."));
    } catch (err) {
      if (mine !== asked) return;
      clear(previewBox).append(h("p", { class: "muted" }, "No preview until the schedule is valid."));
      showError(err);
    }
  }
  c.type.addEventListener("change", showSchedule);
  for (const input of [c.expr, c.tz, c.runAt, c.every]) input.addEventListener("input", schedulePreview);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const id of ALL_INPUTS) setFieldError(id, "");
    formError.textContent = "";
    let body;
    try { body = bodyOf(c); } catch (err) { setFieldError(err.input, err.message); document.getElementById(err.input)?.focus(); return; }
    try {
      const { data } = await post("/v1/jobs", body, { headers: { "Idempotency-Key": idempotencyKey() } });
      say(`Created ${data.name || data.id}; next run ${data.next_run_at}.`);
      navigate(`#/jobs/${data.id}`);
    } catch (err) {
      showError(err, true);
    }
  });

  function showError(err, focus = false) {
    const key = err.field || "";
    const input = FIELD_INPUTS[key] || FIELD_INPUTS[key.split(".").slice(0, 2).join(".")] || FIELD_INPUTS[key.split(".")[0]];
    if (input && setFieldError(input, err.message)) {
      if (focus) document.getElementById(input).focus();
    } else {
      formError.textContent = `${err.title || "Error"}: ${err.message}${key ? ` (field ${key})` : ""}`;
    }
  }

  view.append(h("h1", { id: "new-title" }, "New job"), form);
  showSchedule();
  c.name.focus();
}

function scheduleOf(c) {
  if (c.type.value === "cron") return c.expr.value.trim() ? { type: "cron", expr: c.expr.value.trim(), tz: c.tz.value.trim() || "UTC" } : null;
  if (c.type.value === "once") return c.runAt.value ? { type: "once", runAt: new Date(c.runAt.value).toISOString() } : null;
  return c.every.value ? { type: "interval", everyS: Number(c.every.value) } : null;
}

function bodyOf(c) {
  const body = { schedule: scheduleOf(c) || { type: c.type.value }, target: { type: "http", url: c.url.value.trim(), method: c.method.value } };
  if (c.name.value.trim()) body.name = c.name.value.trim();
  if (c.payload.value.trim()) {
    try { body.payload = JSON.parse(c.payload.value); } catch (err) { throw Object.assign(new Error(`Not valid JSON: ${err.message}`), { input: "c-payload" }); }
  }
  if (c.priority.value !== "default") body.priority = c.priority.value;
  const labels = c.labels.value.split(",").map((s) => s.trim()).filter(Boolean);
  if (labels.length) {
    body.labels = {};
    for (const pair of labels) {
      const [k, ...rest] = pair.split("=");
      if (!rest.length) throw Object.assign(new Error(`“${pair}” is not key=value`), { input: "c-labels" });
      body.labels[k.trim()] = rest.join("=").trim();
    }
  }
  if (c.attempts.value) body.retryPolicy = { maxAttempts: Number(c.attempts.value) };
  return body;
}

