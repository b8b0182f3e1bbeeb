// The web view's calls to berth's API, and the small helpers every page uses.
//
// A login leaves an HttpOnly cookie (for /v1/) and a key held in this page's memory only, never in storage:
// a page a sandbox serves through a path-form preview shares this origin, and could read any storage of it.
// The key goes with every call, as X-Berth-Key, or as berth_key in the URL of an event stream or a
// WebSocket. A reload asks for the token again.

const login_ = { key: null, sandbox: null };

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function key() {
  return login_.key;
}

/** The sandbox a session token's login is for, or null for an API token's. */
export function loginSandbox() {
  return login_.sandbox;
}

let onLoggedOut = () => {};
export function whenLoggedOut(f) {
  onLoggedOut = f;
}

async function failure(r) {
  let code = null;
  let message = `${r.status} ${r.statusText}`;
  try {
    const body = await r.json();
    if (body && body.error) {
      code = body.error.code;
      message = body.error.message;
    }
  } catch (_) {
    // Not an API error body: the status says what there is to say.
  }
  return new ApiError(r.status, code, message);
}

export async function login(token) {
  const r = await fetch('/ui/login', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token }),
  });
  if (!r.ok) throw await failure(r);
  const body = await r.json();
  login_.key = body.key;
  login_.sandbox = body.sandbox || null;
  return body;
}

export async function logout() {
  await fetch('/ui/logout', { method: 'POST', headers: { 'X-Berth-Key': key() || '' } }).catch(() => {});
  forget();
}

/** Drop the login from the page (it has ended on the daemon's side, or is being ended). */
export function forget() {
  login_.key = null;
  login_.sandbox = null;
}

/** One API call: the parsed JSON answer (text for other types, null for 204); an ApiError otherwise. */
export async function call(method, path, body, opts = {}) {
  const headers = { 'X-Berth-Key': key() || '' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: opts.signal,
  });
  if (!r.ok) {
    const err = await failure(r);
    if (r.status === 401) onLoggedOut(err);
    throw err;
  }
  if (opts.raw) return r;
  if (r.status === 204) return null;
  const type = r.headers.get('content-type') || '';
  return type.includes('json') ? r.json() : r.text();
}

export const get = (path, opts) => call('GET', path, undefined, opts);
export const post = (path, body, opts) => call('POST', path, body ?? {}, opts);
export const del = (path, opts) => call('DELETE', path, undefined, opts);

/** A URL of this listener with the login's key in its query (for EventSource and WebSocket). */
export function withKey(path) {
  return `${path}${path.includes('?') ? '&' : '?'}berth_key=${encodeURIComponent(key() || '')}`;
}

/** Lifecycle events as they happen; the returned EventSource is closed by its caller. */
export function events(onEvent) {
  const source = new EventSource(withKey('/v1/events?follow=true'));
  source.addEventListener('lifecycle', (m) => onEvent(JSON.parse(m.data)));
  return source;
}

/** Read a streamed answer as text, a chunk at a time, until it ends or `signal` aborts. */
export async function stream(path, onText, signal) {
  const r = await call('GET', path, undefined, { raw: true, signal });
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    onText(decoder.decode(value, { stream: true }));
  }
  onText(decoder.decode());
}

/** Download an API answer as a file the browser saves. */
export async function download(path, name) {
  const r = await call('GET', path, undefined, { raw: true });
  const url = URL.createObjectURL(await r.blob());
  const a = el('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/**
 * An element: `attrs` are properties (`class`, `text`, `on<event>` handlers, `data-*` and other attributes),
 * children are elements or strings (always text, never HTML).
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k in node && !k.startsWith('data-') && k !== 'list') node[k] = v;
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** A message at the bottom of the page for a few seconds (errors stay until clicked). */
export function toast(message, kind = 'info') {
  const box = document.getElementById('toasts');
  const t = el('div', { class: `toast ${kind}`, text: message, onclick: () => t.remove() });
  box.append(t);
  if (kind !== 'error') setTimeout(() => t.remove(), 5000);
}

/** Run an action of a button: the button waits, a failure is said in a toast. */
export async function act(button, what, f) {
  if (button) button.disabled = true;
  try {
    const out = await f();
    if (what) toast(what, 'ok');
    return out;
  } catch (err) {
    toast(err.message, 'error');
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function time(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : '—';
}

export function stateBadge(state) {
  return el('span', { class: `state ${state}`, text: state });
}

/** `path` with its query parameters, each encoded. */
export function q(path, params) {
  const parts = Object.entries(params)
    .filter(([, v]) => v !== undefined && v !== null && v !== '')
    .map(([k, v]) => `${k}=${encodeURIComponent(v)}`);
  return parts.length ? `${path}?${parts.join('&')}` : path;
}
