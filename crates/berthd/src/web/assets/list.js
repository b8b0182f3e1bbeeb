// The list of sandboxes: kept up to date by the daemon's lifecycle events, its CPU and memory figures by
// polling the usage every two seconds.

import { act, bytes, del, duration, el, events, get, post, stateBadge, toast } from './api.js';

const USAGE_EVERY_MS = 2000;

/** CPU use now, in percent of one core, from two usage samples of the same sandbox. */
function cpuNow(before, after) {
  if (!before || !after || after.sampled_at_ms <= before.sampled_at_ms) return null;
  const seconds = (after.sampled_at_ms - before.sampled_at_ms) / 1000;
  return Math.max(0, (100 * (after.cpu_seconds - before.cpu_seconds)) / seconds);
}

export function ttlLeft(s, now = Date.now()) {
  return s.expires_at_ms ? duration(s.expires_at_ms - now) : '—';
}

/** Buttons for what can be done to a sandbox from the list (and its page). */
export function actions(s, after = () => {}) {
  const id = s.id;
  const b = (label, what, f, cls = '') => {
    const button = el('button', { class: cls, text: label, 'data-action': label.toLowerCase() });
    button.addEventListener('click', async (e) => {
      e.preventDefault();
      e.stopPropagation();
      const out = await act(button, what, f);
      if (out !== undefined) after(label.toLowerCase(), out);
    });
    return button;
  };
  const out = [];
  if (s.state === 'running' || s.state === 'paused') {
    out.push(b('Stop', `stopped ${s.name}`, () => post(`/v1/sandboxes/${id}/stop`)));
  } else if (s.state === 'stopped') {
    out.push(b('Start', `started ${s.name}`, () => post(`/v1/sandboxes/${id}/start`)));
  }
  out.push(
    b('Snapshot', null, async () => {
      const snap = await post(`/v1/sandboxes/${id}/snapshots`, {});
      toast(`snapshot ${snap.id} of ${s.name} taken`, 'ok');
      return snap;
    }),
  );
  if (s.state === 'running' || s.state === 'stopped') {
    out.push(
      b('Fork', null, async () => {
        const forked = await post(`/v1/sandboxes/${id}/fork`, { count: 1 });
        toast(`forked ${s.name}: ${forked.sandboxes.map((c) => c.name).join(', ')}`, 'ok');
        return forked;
      }),
    );
  }
  out.push(
    b(
      'Remove',
      null,
      async () => {
        if (!window.confirm(`Remove ${s.name} (${id})? Its processes end and its files go.`)) return undefined;
        const receipt = await del(`/v1/sandboxes/${id}`);
        toast(`removed ${s.name}: ${receipt.clean ? 'nothing left behind' : 'see its receipt'}`, 'ok');
        return receipt;
      },
      'danger',
    ),
  );
  return el('span', { class: 'actions' }, out);
}

export function renderList(root) {
  const body = el('tbody');
  const empty = el('p', { class: 'muted', text: 'No sandboxes yet. Create one with berth create, or below.' });
  const table = el(
    'table',
    { class: 'list', id: 'sandboxes' },
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        ['Name', 'State', 'Image', 'Age', 'TTL left', 'CPU', 'Memory', 'Owner', 'Labels', ''].map((h) =>
          el('th', { text: h }),
        ),
      ),
    ),
    body,
  );
  const name = el('input', { placeholder: 'name (optional)', id: 'create-name' });
  const ttl = el('input', { placeholder: 'TTL seconds (optional)', id: 'create-ttl', size: 18 });
  const create = el('button', { text: 'Create sandbox', id: 'create' });
  const form = el('form', { class: 'inline' }, name, ttl, create);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const req = {};
    if (name.value.trim()) req.name = name.value.trim();
    if (ttl.value.trim()) req.ttl_seconds = Number(ttl.value);
    const made = await act(create, null, () => post('/v1/sandboxes', req));
    if (made) {
      toast(`created ${made.name}`, 'ok');
      name.value = '';
      refresh();
    }
  });
  root.replaceChildren(el('h2', { text: 'Sandboxes' }), table, empty, form);

  let sandboxes = [];
  let usage = new Map();
  let previous = new Map();

  function draw() {
    const now = Date.now();
    empty.hidden = sandboxes.length > 0;
    table.hidden = sandboxes.length === 0;
    body.replaceChildren(
      ...sandboxes.map((s) => {
        const u = usage.get(s.id);
        const cpu = cpuNow(previous.get(s.id), u);
        const labels = Object.entries(s.labels || {}).map(([k, v]) => el('span', { class: 'label', text: `${k}=${v}` }));
        return el(
          'tr',
          { 'data-id': s.id, 'data-state': s.state },
          el('td', {}, el('a', { href: `#/s/${s.id}`, text: s.name }), el('div', { class: 'muted mono', text: s.id })),
          el('td', {}, stateBadge(s.state)),
          el('td', { text: s.image }),
          el('td', { text: duration(now - s.created_at_ms) }),
          el('td', { text: ttlLeft(s, now) }),
          el('td', { class: 'num', text: cpu === null ? '—' : `${cpu.toFixed(1)}%` }),
          el('td', { class: 'num', text: u ? bytes(u.memory_bytes) : '—' }),
          el('td', {}, s.owner ? el('a', { href: `#/s/${s.owner}`, text: s.owner, class: 'mono' }) : '—'),
          el('td', {}, labels),
          el('td', {}, actions(s, () => refresh())),
        );
      }),
    );
  }

  let loading = null;
  async function refresh() {
    if (loading) return loading;
    loading = (async () => {
      try {
        sandboxes = await get('/v1/sandboxes');
        sandboxes.sort((a, b) => b.created_at_ms - a.created_at_ms);
        draw();
      } catch (err) {
        toast(err.message, 'error');
      } finally {
        loading = null;
      }
    })();
    return loading;
  }

  async function sample() {
    try {
      const now = await get('/v1/usage');
      previous = usage;
      usage = new Map(now.map((u) => [u.id, u]));
      draw();
    } catch (_) {
      // The next sample tries again; a logged-out view is said elsewhere.
    }
  }

  let soon = null;
  const source = events(() => {
    clearTimeout(soon);
    soon = setTimeout(refresh, 150);
  });
  const timer = setInterval(sample, USAGE_EVERY_MS);
  refresh();
  sample();
  return () => {
    source.close();
    clearInterval(timer);
    clearTimeout(soon);
  };
}
