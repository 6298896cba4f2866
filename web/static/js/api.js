// The API client: every call carries the bearer token kept in
// sessionStorage, and every error becomes an ApiError with the problem
// document's stable code, so pages show words and a code, never raw JSON.

export const TOKEN_KEY = 'berth.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// claims returns the token's role and subject (read only to label the
// page; the server checks the token on every call), or null.
export function claims() {
  return claimsOf(token());
}

// claimsOf reads the claims of the token t (not necessarily the stored one).
export function claimsOf(t) {
  const part = t.split('.')[1];
  if (!part) return null;
  try {
    const json = atob(part.replace(/-/g, '+').replace(/_/g, '/'));
    const c = JSON.parse(json);
    if (c.exp && c.exp * 1000 < Date.now()) return null;
    return { role: c.role, sub: c.sub };
  } catch {
    return null;
  }
}

export class ApiError extends Error {
  constructor(status, problem, headers) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code || `http_${status}`;
    this.problem = problem;
    this.retryAfter = Number(headers?.get?.('Retry-After')) || 0;
  }
}

// api calls the API and returns the decoded answer; it throws ApiError
// (code "network_error" when the server could not be reached: the caller
// decides whether a retry is safe). A bearer given (the sign-in checking a
// pasted token) is sent instead of the stored token, which stays as it is.
export async function api(method, path, { body, headers = {}, signal, bearer } = {}) {
  const h = { Accept: 'application/json', ...headers };
  const t = bearer ?? token();
  if (t) h.Authorization = `Bearer ${t}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { code: 'network_error', detail: 'berth could not be reached. Check the connection and try again.' });
  }
  let data = null;
  if ((res.headers.get('Content-Type') || '').includes('json')) data = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, data || { code: `http_${res.status}`, detail: res.statusText }, res.headers);
  return data;
}

// newKey returns a fresh Idempotency-Key: one per attempt, reused only
// when that very attempt is retried.
export function newKey() {
  return crypto.randomUUID();
}

let airportList;
// airports returns the airports by code (fetched once per page load).
export async function airports() {
  airportList ??= api('GET', '/airports').then((r) => new Map(r.airports.map((a) => [a.code, a])));
  return airportList;
}

let cityList;
// cities returns the car cities by code (fetched once per page load).
export async function cities() {
  cityList ??= api('GET', '/cities').then((r) => new Map(r.cities.map((c) => [c.code, c])));
  return cityList;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// send makes one attempt at a change with its own Idempotency-Key, and
// retries that same attempt (same key, same body: the server answers a
// repeat with the first answer, never doing it twice) while the network
// failed or the server was too busy to answer.
export async function send(method, path, body, headers = {}) {
  const key = newKey();
  for (let i = 0; ; i++) {
    try {
      return await api(method, path, { body, headers: { ...headers, 'Idempotency-Key': key } });
    } catch (e) {
      const retry = e.code === 'network_error' || e.code === 'idempotency_key_in_use' || e.code === 'overloaded';
      if (!retry || i >= 3) throw e;
      await sleep(Math.max(e.retryAfter * 1000, 400 * 2 ** i));
    }
  }
}
