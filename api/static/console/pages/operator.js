// The operator page: lanes and their lag, the 1,024-shard map coloured by owner and epoch, the forecast per
// coming minute, the sweeper's repairs, dead letters per tenant. Needs the operator key, not a tenant key.
import { get, keys } from "../api.js";
import { clear, field, h, setFieldError, when } from "../ui.js";
import { barChart } from "./charts.js";

const REFRESH_MS = 10_000;
const op = (path) => get(path, { operator: true });

export async function operatorPage(view, { navigate }) {
  if (!keys.operator()) return askKey(view, navigate);
  view.append(h("h1", {}, "Operator"), h("p", { class: "small muted", id: "op-asof" }, ""));
  const body = h("div", {});
  view.append(body);
  let stopped = false;
  const load = async () => {
    try {
      const [lanes, shards, forecast, sweeper, dead] = await Promise.all([
        op("/v1/operator/lanes"), op("/v1/operator/shards"), op("/v1/operator/forecast?minutes=15"),
        op("/v1/operator/sweeper"), op("/v1/operator/dead-letters"),
      ]);
      if (stopped) return;
      clear(body).append(
        h("div", { class: "grid2" }, lanesPanel(lanes.data.items), sweeperPanel(sweeper.data)),
        shardPanel(shards.data),
        h("div", { class: "grid2" }, forecastPanel(forecast.data), deadPanel(dead.data.items)));
      barChart(body.querySelector("#op-forecast-chart"), forecast.data.counts.map((_, i) => Date.parse(forecast.data.start) / 1000 + i * 60), forecast.data.counts, "runs due");
      document.getElementById("op-asof").textContent = `As of ${when(shards.data.as_of)}; refreshed every ${REFRESH_MS / 1000} s.`;
    } catch (err) {
      if (stopped) return;
      if (err.status === 401) { keys.setOperator(""); navigate("#/operator"); return; }
      clear(body).append(h("p", { class: "form-error", role: "alert" }, err.message));
    }
  };
  await load();
  const timer = setInterval(load, REFRESH_MS);
  return () => { stopped = true; clearInterval(timer); };
}

function askKey(view, navigate) {
  const input = h("input", { type: "password", autocomplete: "off", spellcheck: "false" });
  const form = h("form", { class: "panel signin", "aria-labelledby": "op-title" },
    h("h1", { id: "op-title" }, "Operator sign-in"),
    h("p", { class: "small muted" }, "The operator key whose sha256 is the setting TICKWHEEL_API_OPERATOR_KEY_SHA256 (tickwheel up writes it to .stack/operator-key). A tenant key does not open this page."),
    field("op-key", "Operator key", input), h("button", { type: "submit" }, "Open the operator page"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    keys.setOperator(input.value.trim());
    try {
      await op("/v1/operator/sweeper");
      navigate("#/operator");
    } catch (err) {
      keys.setOperator("");
      setFieldError("op-key", err.status === 401 ? err.message : `The API answered: ${err.message}`);
      input.focus();
    }
  });
  view.append(form);
  input.focus();
}

function lanesPanel(items) {
  return h("section", { class: "panel", "aria-labelledby": "lanes-title" }, h("h2", { id: "lanes-title" }, "Lanes"),
    h("div", { class: "table-wrap" }, h("table", { "aria-label": "Lanes and consumer lag" },
      h("thead", {}, h("tr", {}, ["Lane", "Lag (messages)", "Topic and consumer group"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, items.map((l) => h("tr", {}, h("th", { scope: "row" }, l.lane), h("td", { class: "num" }, l.lag),
        h("td", { class: "mono small" }, l.topic, h("br"), l.group)))))));
}

function sweeperPanel(doc) {
  const reasons = Object.entries(doc.repairs);
  return h("section", { class: "panel", "aria-labelledby": "sweep-title" }, h("h2", { id: "sweep-title" }, "Sweeper"),
    h("p", {}, `${doc.sweeps} sweep(s) finished.`),
    reasons.length
      ? h("table", { "aria-label": "Sweeper repairs" }, h("tbody", {}, reasons.map(([r, n]) => h("tr", {}, h("th", { scope: "row" }, r), h("td", { class: "num" }, n)))))
      : h("p", { class: "muted" }, "No repairs: every active job's next run was where it should be."));
}

// owner -> hue; epochs of one owner -> lightness, so a stale epoch shows as a different shade of its owner
function palette(ranges) {
  const owners = [...new Set(ranges.map((r) => r.owner))].sort();
  const epochs = [...new Set(ranges.map((r) => r.epoch))].sort((a, b) => b - a);
  return (owner, epoch) => {
    const hue = Math.round((owners.indexOf(owner) * 360) / Math.max(1, owners.length) + 200) % 360;
    const light = 38 + Math.min(3, epochs.indexOf(epoch)) * 14;
    return `hsl(${hue} 65% ${light}%)`;
  };
}

function shardPanel(doc) {
  const colour = palette(doc.ranges);
  const map = h("div", { class: "shardmap", role: "img", id: "shardmap",
    "aria-label": `${doc.owned} of ${doc.shards} shards owned; the table below lists each owner's ranges` });
  for (const cell of doc.cells) {
    const span = h("span", { class: cell.owner ? "owned" : "none", title: cell.owner ? `shard ${cell.shard}: ${cell.owner}, epoch ${cell.epoch}` : `shard ${cell.shard}: no checkpoint yet` });
    if (cell.owner) span.style.background = colour(cell.owner, cell.epoch);
    map.append(span);
  }
  const byOwner = new Map();
  for (const r of doc.ranges) {
    const key = `${r.owner}\u0000${r.epoch}`;
    if (!byOwner.has(key)) byOwner.set(key, { owner: r.owner, epoch: r.epoch, ranges: [], count: 0 });
    const entry = byOwner.get(key);
    entry.ranges.push(r.end - r.start === 1 ? `${r.start}` : `${r.start}–${r.end - 1}`);
    entry.count += r.end - r.start;
  }
  const table = h("table", { "aria-label": "Shard ranges by owner and epoch" },
    h("thead", {}, h("tr", {}, ["", "Owner", "Epoch", "Shards", "Ranges"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, [...byOwner.values()].map((o) => {
      const swatch = h("span", { class: "chip", "aria-hidden": "true" }, "\u00a0\u00a0");
      swatch.style.background = colour(o.owner, o.epoch);
      return h("tr", {}, h("td", {}, swatch), h("td", { class: "mono small" }, o.owner), h("td", { class: "num" }, o.epoch),
        h("td", { class: "num" }, o.count), h("td", { class: "small" }, o.ranges.join(", ")));
    })));
  return h("section", { class: "panel", "aria-labelledby": "shards-title" },
    h("h2", { id: "shards-title" }, `Shards: ${doc.owned} of ${doc.shards} owned`),
    h("p", { class: "small muted" }, "Each cell is a shard, coloured by the dispatcher that last checkpointed it; a lighter shade of the same colour is an older epoch. Hatched: no checkpoint yet."),
    h("div", { class: "grid2" }, map, h("div", { class: "table-wrap" }, table)));
}

function forecastPanel(doc) {
  return h("section", { class: "panel", "aria-labelledby": "fc-title" }, h("h2", { id: "fc-title" }, "Runs due per coming minute"),
    h("div", { class: "chart", id: "op-forecast-chart", role: "img", "aria-label": `Runs due in the next ${doc.counts.length} minutes: ${doc.counts.join(", ")}` }),
    h("p", { class: "small" }, `Next ${doc.counts.length} minutes: ${doc.counts.reduce((a, b) => a + b, 0)} run(s) written so far.`));
}

function deadPanel(items) {
  const busy = items.filter((t) => t.last_day > 0);
  return h("section", { class: "panel", "aria-labelledby": "dl-title" }, h("h2", { id: "dl-title" }, "Dead letters per tenant"),
    busy.length
      ? h("table", { "aria-label": "Dead letters per tenant" },
        h("thead", {}, h("tr", {}, ["Tenant", "Last hour", "Last 24 h", "Per hour (24 h)"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, busy.map((t) => h("tr", {}, h("th", { scope: "row" }, t.name), h("td", { class: "num" }, t.last_hour),
          h("td", { class: "num" }, t.last_day), h("td", { class: "num" }, t.per_hour_last_day.toFixed(2))))))
      : h("p", { class: "muted" }, `No dead letters in the last 24 hours across ${items.length} tenant(s).`));
}
