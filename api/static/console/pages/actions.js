// Pause, resume and delete: the same calls from the jobs table and from a job's page.
import { call, idempotencyKey } from "../api.js";
import { confirmDialog, say } from "../ui.js";

/** PATCH the state with If-Match; resolves to the updated job, or null when refused (said in the live region). */
export async function setState(job, state) {
  try {
    const { data } = await call("PATCH", `/v1/jobs/${job.id}`, {
      body: { state },
      headers: { "If-Match": `"${job.version}"`, "Idempotency-Key": idempotencyKey() },
    });
    say(`${job.name || job.id}: ${state === "PAUSED" ? "paused" : "resumed"}.`);
    return data;
  } catch (err) {
    say(err.status === 412 ? `The job changed meanwhile (${err.message}); reload and try again.` : err.message, { bad: true });
    return null;
  }
}

/** DELETE after a confirmation; resolves true when deleted. */
export async function deleteJob(job) {
  const ok = await confirmDialog("Delete this job?", `“${job.name || job.id}” stops firing; its unstarted run is cancelled. This cannot be undone.`, "Delete");
  if (!ok) return false;
  try {
    await call("DELETE", `/v1/jobs/${job.id}`, { headers: { "If-Match": `"${job.version}"`, "Idempotency-Key": idempotencyKey() } });
    say(`${job.name || job.id}: deleted.`);
    return true;
  } catch (err) {
    say(err.message, { bad: true });
    return false;
  }
}
