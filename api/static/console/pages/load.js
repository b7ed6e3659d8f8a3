// Upcoming load: the tenant's runs due per minute over the next 2 hours and per hour over the next 7 days,
// as heat maps (tables, so every count is also read out), from /v1/due-counts.
import { get } from "../api.js";
import { h, heat } from "../ui.js";
import { barChart } from "./charts.js";

const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
const hm = (d) => d.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit", hour12: false });

export async function loadPage(view) {
  const [{ data: minutes }, { data: hours }] = await Promise.all([get("/v1/due-counts?resolution=minute"), get("/v1/due-counts?resolution=hour")]);
  view.append(
    h("h1", {}, "Upcoming load"),
    h("p", { class: "muted small" }, `Runs your active jobs will start, projected from their schedules; times in ${zone}.`,
      minutes.truncated || hours.truncated ? " The projection hit its limit: counts are a lower bound." : ""),
    section("Per minute, next 2 hours", minuteGrid(minutes), minutes),
    section("Per hour, next 7 days", hourGrid(hours), hours));
  const chart = h("div", { class: "chart", role: "img", "aria-label": "Bar chart of runs due per minute over the next 2 hours (the table above has every value)" });
  view.querySelector("section").append(chart);
  barChart(chart, minutes.counts.map((_, i) => Date.parse(minutes.start) / 1000 + i * 60), minutes.counts, "runs due");
}

function section(title, table, doc) {
  const total = doc.counts.reduce((a, b) => a + b, 0);
  const peak = Math.max(0, ...doc.counts);
  return h("section", { class: "panel" }, h("h2", {}, title),
    h("p", { class: "small" }, `${total} run(s) in all; busiest ${doc.bucket_s === 60 ? "minute" : "hour"}: ${peak}.`),
    legend(peak), h("div", { class: "table-wrap" }, table));
}

function legend(max) {
  const steps = [0, Math.ceil(max / 4), Math.ceil(max / 2), max].filter((v, i, a) => a.indexOf(v) === i);
  return h("div", { class: "legend", "aria-hidden": "true" }, "fewer", steps.map((v) => {
    const c = heat(v, max);
    return h("span", { class: "sw", style: `background:${c.bg}`, title: String(v) });
  }), "more");
}

function cell(count, max, label) {
  const c = heat(count, max);
  return h("td", { style: `background:${c.bg};color:${c.fg}`, title: `${label}: ${count}`, "aria-label": `${label}: ${count} run(s)` }, count || "");
}

function minuteGrid(doc) {
  // rows of 15 minutes: 8 rows x 15 columns
  const start = Date.parse(doc.start);
  const max = Math.max(1, ...doc.counts);
  const rows = [];
  for (let r = 0; r < doc.counts.length / 15; r += 1) {
    const rowStart = new Date(start + r * 15 * 60_000);
    const cells = doc.counts.slice(r * 15, r * 15 + 15).map((count, i) => cell(count, max, hm(new Date(rowStart.getTime() + i * 60_000))));
    rows.push(h("tr", {}, h("th", { scope: "row" }, hm(rowStart)), cells));
  }
  return h("table", { class: "heat", "aria-label": "Runs due per minute" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "from"), Array.from({ length: 15 }, (_, i) => h("th", { scope: "col" }, `+${i}`)))),
    h("tbody", {}, rows));
}

function hourGrid(doc) {
  // one row per local day, one column per local hour
  const max = Math.max(1, ...doc.counts);
  const byDay = new Map();
  for (const [i, count] of doc.counts.entries()) {
    const at = new Date(Date.parse(doc.start) + i * 3_600_000);
    const day = at.toLocaleDateString("en-GB", { weekday: "short", day: "2-digit", month: "short" });
    if (!byDay.has(day)) byDay.set(day, new Array(24).fill(null));
    const slot = byDay.get(day);
    const hour = at.getHours();
    // the hour clocks fall back repeats: both UTC hours land in one local cell, so their counts add up
    slot[hour] = slot[hour] ? [slot[hour][0] + count, `${slot[hour][1]} (twice: clocks fall back)`] : [count, `${day} ${hm(at)}`];
  }
  return h("table", { class: "heat", "aria-label": "Runs due per hour" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "day"), Array.from({ length: 24 }, (_, i) => h("th", { scope: "col" }, String(i).padStart(2, "0"))))),
    h("tbody", {}, [...byDay].map(([day, hoursOfDay]) => h("tr", {}, h("th", { scope: "row" }, day),
      hoursOfDay.map((v) => (v ? cell(v[0], max, v[1]) : h("td", { class: "muted" }, "")))))));
}
