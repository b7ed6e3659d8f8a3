// A schedule in words: "at 09:30 Mon–Fri, Europe/Paris". Common cron shapes are put in words; anything else is
// shown as its expression, which is never wrong.
const DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const MONTHS = ["", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const pad = (n) => String(n).padStart(2, "0");
const isNum = (s) => /^\d+$/.test(s);

function list(part, names) {
  return part.split(",").map((item) => {
    const range = item.match(/^(\d+)-(\d+)$/);
    if (range && names) return `${names[+range[1]]}–${names[+range[2]]}`;
    if (isNum(item) && names) return names[+item];
    return item;
  }).join(", ");
}

function dayPart(dom, month, dow) {
  const parts = [];
  if (dow !== "*" && /^[\d,-]+$/.test(dow)) parts.push(list(dow, DAYS));
  else if (dow !== "*") return null;
  if (dom !== "*" && /^[\d,-]+$/.test(dom)) parts.push(`on day ${dom} of the month`);
  else if (dom !== "*") return null;
  if (month !== "*" && /^[\d,-]+$/.test(month)) parts.push(`in ${list(month, MONTHS)}`);
  else if (month !== "*") return null;
  return parts.length ? parts.join(" ") : "every day";
}

export function cronWords(expr) {
  const fields = expr.trim().split(/\s+/);
  if (fields.length !== 5) return null;
  const [minute, hour, dom, month, dow] = fields;
  const days = dayPart(dom, month, dow);
  if (days === null) return null;
  const onDays = days === "every day" ? "" : ` ${days}`;
  if (minute === "*" && hour === "*") return `every minute${onDays}`;
  const step = minute.match(/^\*\/(\d+)$/);
  if (step && hour === "*") return `every ${step[1]} minutes${onDays}`;
  if (isNum(minute) && hour === "*") return `at minute ${minute} of every hour${onDays}`;
  if (isNum(minute) && isNum(hour)) return `at ${pad(hour)}:${pad(minute)} ${days}`;
  if (isNum(minute) && /^[\d,]+$/.test(hour)) return `at ${hour.split(",").map((x) => `${pad(x)}:${pad(minute)}`).join(", ")} ${days}`;
  return null;
}

function seconds(s) {
  if (s % 86400 === 0) return `${s / 86400} d`;
  if (s % 3600 === 0) return `${s / 3600} h`;
  if (s % 60 === 0) return `${s / 60} min`;
  return `${s} s`;
}

/** The words for a job's `schedule` document. */
export function scheduleWords(schedule) {
  if (!schedule) return "";
  if (schedule.type === "once") return `once, at ${schedule.runAt}`;
  if (schedule.type === "interval") return `every ${seconds(schedule.everyS)}`;
  const zone = schedule.tz || "UTC";
  const words = cronWords(schedule.expr || "");
  return words ? `${words}, ${zone}` : `cron “${schedule.expr}”, ${zone}`;
}
