// Small DOM helpers: elements are built with text nodes only (never innerHTML with data), so nothing the API
// returns can run as markup.

/** h("a", {href: "#"}, "text", child, ...) */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name === "style") el.style.cssText = value; // CSSOM, which the page's CSP allows (style attributes it forbids)
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }

/** Announce a message in the live region (polite) for a few seconds. */
export function say(text, { bad = false } = {}) {
  const box = document.getElementById("status");
  const p = h("p", { class: bad ? "bad" : null }, text);
  box.append(p);
  setTimeout(() => p.remove(), bad ? 9000 : 4000);
}

export function badge(status) {
  return h("span", { class: `badge s-${status}` }, status || "—");
}

const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone;

/** "Mon 30 Nov, 21:05:10" in the given zone (default: the browser's). */
export function when(iso, zone = browserZone, withSeconds = true) {
  if (!iso) return "—";
  const fmt = new Intl.DateTimeFormat("en-GB", {
    weekday: "short", day: "2-digit", month: "short", hour: "2-digit", minute: "2-digit",
    second: withSeconds ? "2-digit" : undefined, hour12: false, timeZone: zone,
  });
  return fmt.format(new Date(iso));
}

/** "in 3 min", "12 s ago" */
export function relative(iso, now = Date.now()) {
  if (!iso) return "";
  const s = Math.round((new Date(iso).getTime() - now) / 1000);
  const abs = Math.abs(s);
  const text = abs < 90 ? `${abs} s` : abs < 5400 ? `${Math.round(abs / 60)} min` : abs < 172800 ? `${Math.round(abs / 3600)} h` : `${Math.round(abs / 86400)} d`;
  return s >= 0 ? `in ${text}` : `${text} ago`;
}

/** Ask before doing something that cannot be undone; resolves true when confirmed. */
export function confirmDialog(title, text, okLabel = "Confirm") {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
    dialog.querySelector("button[value=cancel]").focus();
  });
}

/** A labelled form field; `error` holds the API's message for that field. */
export function field(id, labelText, control, hint) {
  control.id = id;
  const error = h("div", { class: "error", id: `${id}-error`, hidden: true });
  const parts = [h("label", { for: id }, labelText), control];
  const described = [`${id}-error`];
  if (hint) { parts.push(h("div", { class: "hint", id: `${id}-hint` }, hint)); described.push(`${id}-hint`); }
  control.setAttribute("aria-describedby", described.join(" "));
  parts.push(error);
  return h("div", { class: "field", dataset: { field: id } }, parts);
}

export function setFieldError(id, message) {
  const control = document.getElementById(id);
  const error = document.getElementById(`${id}-error`);
  if (!control || !error) return false;
  error.textContent = message || "";
  error.hidden = !message;
  if (message) control.setAttribute("aria-invalid", "true"); else control.removeAttribute("aria-invalid");
  return true;
}

/** Colour on a white -> deep blue ramp for value/max (text colour chosen for contrast). */
export function heat(value, max) {
  if (!value) return { bg: "#f0f0ec", fg: "#545454" };
  const t = Math.min(1, Math.sqrt(value / Math.max(1, max)));
  const light = Math.round(92 - t * 66); // 92% .. 26%
  return { bg: `hsl(214 70% ${light}%)`, fg: light < 55 ? "#ffffff" : "#1b1b1b" };
}

/** A wall-clock instant as the API wrote it ("2026-03-29T03:00:00+02:00") as "Sun 29 Mar 2026, 03:00:00 (UTC+02:00)",
 *  read in its own offset, not converted to the browser's zone. */
export function wallClock(iso) {
  const m = /^(\d{4})-(\d\d)-(\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$/.exec(iso || "");
  if (!m) return iso || "—";
  const day = new Date(Date.UTC(+m[1], +m[2] - 1, +m[3])).toLocaleDateString("en-GB", { weekday: "short", day: "2-digit", month: "short", year: "numeric", timeZone: "UTC" });
  return `${day}, ${m[4]} (UTC${m[5] === "Z" ? "+00:00" : m[5]})`;
}

/** The offset part of an ISO instant ("+02:00"). */
export const offsetOf = (iso) => (/(Z|[+-]\d\d:\d\d)$/.exec(iso || "") || ["", ""])[1];
