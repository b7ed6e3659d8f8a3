// Calls to the public API with the key typed into this tab (sessionStorage only: gone when the tab closes).
const TENANT_KEY = "tickwheel.key";
const OPERATOR_KEY = "tickwheel.operatorKey";

export const keys = {
  tenant: () => sessionStorage.getItem(TENANT_KEY),
  operator: () => sessionStorage.getItem(OPERATOR_KEY),
  setTenant: (key) => sessionStorage.setItem(TENANT_KEY, key),
  setOperator: (key) => sessionStorage.setItem(OPERATOR_KEY, key),
  clear: () => { sessionStorage.removeItem(TENANT_KEY); sessionStorage.removeItem(OPERATOR_KEY); },
};

/** An application/problem+json answer (or a network failure) as an Error that keeps the problem's fields. */
export class Problem extends Error {
  constructor(status, doc) {
    super(doc.detail || doc.title || `HTTP ${status}`);
    this.status = status;
    this.title = doc.title || "";
    this.field = doc.field || null;
  }
}

/** Call the API; resolves to {status, data, etag}, rejects with Problem for a 4xx/5xx or a network failure. */
export async function call(method, path, { body, headers = {}, operator = false } = {}) {
  const key = operator ? keys.operator() : keys.tenant();
  const init = { method, headers: { Accept: "application/json", ...headers } };
  if (key) init.headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new Problem(0, { title: "Network error", detail: `the API did not answer (${err.message})` });
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = { detail: text }; }
  }
  if (!response.ok) throw new Problem(response.status, data || {});
  return { status: response.status, data, etag: response.headers.get("ETag") };
}

export const get = (path, opts) => call("GET", path, opts);
export const post = (path, body, opts = {}) => call("POST", path, { ...opts, body });

/** A fresh Idempotency-Key, so a retried click never creates twice. */
export const idempotencyKey = () => (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`);
