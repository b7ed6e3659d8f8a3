// Dead letters: filter by job and time, select, dry-run, then redrive, showing the count the dry run predicted.
import { get, idempotencyKey, post } from "../api.js";
import { h, say, when } from "../ui.js";

export async function deadPage(view, { params, navigate }) {
  const jobId = params.get("job_id") || "";
  const since = params.get("since") || "";
  const until = params.get("until") || "";
  const jobInput = h("input", { id: "d-job", value: jobId, placeholder: "job id", size: 36, spellcheck: "false", class: "mono" });
  const sinceInput = h("input", { id: "d-since", type: "datetime-local", value: since });
  const untilInput = h("input", { id: "d-until", type: "datetime-local", value: until });
  const filters = h("form", { class: "filters", role: "search", "aria-label": "Filter dead letters" },
    h("div", {}, h("label", { for: "d-job" }, "Job"), jobInput),
    h("div", {}, h("label", { for: "d-since" }, "Dead since (local)"), sinceInput),
    h("div", {}, h("label", { for: "d-until" }, "Dead before (local)"), untilInput),
    h("button", { type: "submit" }, "Filter"));
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = new URLSearchParams();
    if (jobInput.value.trim()) q.set("job_id", jobInput.value.trim());
    if (sinceInput.value) q.set("since", sinceInput.value);
    if (untilInput.value) q.set("until", untilInput.value);
    navigate(`#/dead?${q}`);
  });

  // the API's filter names: query (list) and body (bulk redrive) spell them differently
  const wire = {};
  if (jobId) wire.jobId = jobId;
  if (since) wire.since = new Date(since).toISOString();
  if (until) wire.until = new Date(until).toISOString();
  const query = new URLSearchParams({ limit: 200 });
  if (wire.jobId) query.set("job_id", wire.jobId);
  if (wire.since) query.set("since", wire.since);
  if (wire.until) query.set("until", wire.until);
  const { data } = await get(`/v1/dead-letters?${query}`);
  const pending = data.items.filter((l) => !l.redriven_at);

  const boxes = new Map();
  const selectAll = h("input", { type: "checkbox", id: "d-all", "aria-label": "Select every dead letter shown" });
  const rows = data.items.map((letter) => {
    const box = h("input", { type: "checkbox", "aria-label": `Select run ${letter.run_id}`, disabled: Boolean(letter.redriven_at) });
    if (!letter.redriven_at) boxes.set(letter.run_id, box);
    return h("tr", { dataset: { runId: letter.run_id } },
      h("td", {}, box),
      h("td", {}, when(letter.dead_at)),
      h("td", { class: "mono small" }, h("a", { href: `#/jobs/${letter.job_id}` }, letter.job_id.slice(0, 8))),
      h("td", { class: "mono small" }, letter.run_id.slice(0, 8)),
      h("td", {}, letter.target_host || ""),
      h("td", { class: "num" }, letter.attempts.length),
      h("td", { class: "small" }, letter.last_error || ""),
      h("td", {}, letter.redriven_at ? `redriven ${when(letter.redriven_at)}` : "dead"));
  });
  selectAll.addEventListener("change", () => { for (const box of boxes.values()) box.checked = selectAll.checked; resetPlan(); });
  for (const box of boxes.values()) box.addEventListener("change", () => resetPlan());

  const planText = h("p", { id: "d-plan", "aria-live": "polite" }, "Run a dry run first: it says how many letters a redrive would send again.");
  const dryRun = h("button", { type: "button", class: "quiet", disabled: !pending.length }, "Dry run");
  const redrive = h("button", { type: "button", disabled: true }, "Redrive");
  let plan = null; // the run ids the dry run predicted

  function selected() { return [...boxes].filter(([, box]) => box.checked).map(([id]) => id); }
  function resetPlan() {
    plan = null;
    redrive.disabled = true;
    redrive.textContent = "Redrive";
    planText.textContent = "Run a dry run first: it says how many letters a redrive would send again.";
  }

  dryRun.addEventListener("click", async () => {
    try {
      const { data: answer } = await post("/v1/dead-letters/redrive", { ...wire, dryRun: true });
      const chosen = selected();
      plan = chosen.length ? answer.run_ids.filter((id) => chosen.includes(id)) : answer.run_ids;
      planText.textContent = `Dry run: ${plan.length} dead letter(s) would be redriven${chosen.length ? " (of the ones you selected)" : " (every one matching the filter)"}. Nothing was sent yet.`;
      redrive.textContent = `Redrive ${plan.length}`;
      redrive.disabled = plan.length === 0;
      redrive.focus();
    } catch (err) { say(err.message, { bad: true }); }
  });
  redrive.addEventListener("click", async () => {
    if (!plan) return;
    const predicted = plan.length;
    let done = 0;
    try {
      if (selected().length) {
        for (const runId of plan) {
          await post(`/v1/dead-letters/${runId}/redrive`, undefined, { headers: { "Idempotency-Key": idempotencyKey() } }).then(() => { done += 1; }, (err) => say(`${runId.slice(0, 8)}: ${err.message}`, { bad: true }));
        }
      } else {
        const { data: answer } = await post("/v1/dead-letters/redrive", { ...wire, dryRun: false }, { headers: { "Idempotency-Key": idempotencyKey() } });
        done = answer.redriven;
      }
      say(`Redriven ${done} of the ${predicted} the dry run predicted.`);
      navigate(location.hash);
    } catch (err) { say(err.message, { bad: true }); }
  });

  view.append(h("h1", {}, "Dead letters"), filters);
  if (!data.items.length) { view.append(h("p", { class: "panel" }, "No dead letters match.")); return; }
  view.append(
    h("div", { class: "toolbar" }, dryRun, redrive), planText,
    h("div", { class: "table-wrap" }, h("table", { "aria-label": "Dead letters" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, selectAll), ["Dead at", "Job", "Run", "Target", "Attempts", "Last error", "State"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows))),
    h("p", { class: "small muted", hidden: !data.next_cursor }, "Showing the newest 200; narrow the filter to see older ones."));
}
