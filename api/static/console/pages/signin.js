// Sign in with a tenant API key: checked with one call, then kept in this tab's sessionStorage only.
import { get, keys } from "../api.js";
import { field, h, setFieldError, say } from "../ui.js";

export async function signinPage(view, { navigate }) {
  const input = h("input", { type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const form = h("form", { class: "panel signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in"),
    h("p", { class: "muted small" }, "Your tenant's API key (tw_…). It stays in this browser tab only and is sent to this API alone."),
    field("api-key", "API key", input),
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    keys.setTenant(input.value.trim());
    try {
      await get("/v1/jobs?limit=1");
    } catch (err) {
      keys.setTenant("");
      setFieldError("api-key", err.status === 401 ? "This key is unknown or revoked." : err.message);
      input.focus();
      return;
    }
    document.getElementById("who").textContent = "signed in";
    say("Signed in.");
    navigate("#/jobs");
  });
  view.append(form);
  input.focus();
}
