// The REST API as the page uses it. The client token lives in this tab's sessionStorage and goes
// out as a bearer header: no cookie, so no request of another site can carry it.

const TOKEN_KEY = "autosched.clientToken";

/** A refusal of the API: its status and its one-line detail. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }

  /** The token is missing, unknown, revoked, or of the worker role. */
  get unauthorized() {
    return this.status === 401 || this.status === 403;
  }
}

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  forget: () => sessionStorage.removeItem(TOKEN_KEY),
};

/** A request to /api/v1/PATH; resolves to the JSON answer, or rejects with an ApiError. */
export async function api(path, { method = "GET", query = {} } = {}) {
  const url = new URL(`/api/v1${path}`, location.origin);
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
  }
  const headers = { Accept: "application/json" };
  const bearer = token.get();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const response = await fetch(url, { method, headers, cache: "no-store" });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new ApiError(response.status, body.detail || `${response.status} ${response.statusText}`);
  }
  return response.json();
}

/** Every item of a paged list route, page by page. */
export async function all(path, query = {}) {
  const items = [];
  for (;;) {
    const page = await api(path, { query: { ...query, limit: 1000, offset: items.length } });
    items.push(...page.data);
    if (!page.data.length || items.length >= page.count) return items;
  }
}
