// A sandbox's page: its record and use at the top, kept current by the lifecycle events; below, one tab at a
// time: execs, terminal, egress, journal, files, diff, previews, and its receipt once it is removed.

import { ApiError, act, bytes, duration, el, events, get, loginSandbox, post, stateBadge, toast, withKey } from './api.js';
import { actions, ttlLeft } from './list.js';
import { diffPanel, egressPanel, execsPanel, filesPanel, journalPanel, previewsPanel, receiptPanel } from './panels.js';
import { Terminal } from './term.js';

const TABS = ['execs', 'terminal', 'egress', 'journal', 'files', 'diff', 'previews', 'receipt'];

function terminalPanel(root, s) {
  const screen = el('div', { class: 'terminal', id: 'terminal' });
  const status = el('span', { class: 'muted', id: 'terminal-status', text: 'not connected' });
  const open = el('button', { text: 'Open a shell', id: 'terminal-open' });
  root.replaceChildren(el('div', { class: 'bar' }, open, status), screen);
  let socket = null;
  const term = new Terminal(screen, 24, 100);
  function connect() {
    if (socket) socket.close();
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const path = withKey(`/v1/sandboxes/${s.id}/shell?rows=${term.rows}&cols=${term.cols}`);
    socket = new WebSocket(`${scheme}://${location.host}${path}`);
    socket.binaryType = 'arraybuffer';
    status.textContent = 'connecting…';
    socket.onmessage = (m) => {
      if (typeof m.data !== 'string') return term.write(new Uint8Array(m.data));
      const msg = JSON.parse(m.data);
      if (msg.started) status.textContent = `connected: exec ${msg.started.exec_id}`;
      if (msg.exit) {
        status.textContent = `the shell ended (exit ${msg.exit.code}${msg.exit.error ? `: ${msg.exit.error}` : ''})`;
      }
      return undefined;
    };
    socket.onclose = (e) => {
      if (!status.textContent.startsWith('the shell ended')) {
        status.textContent = e.reason ? `closed: ${e.reason}` : 'closed';
      }
    };
    socket.onerror = () => {
      status.textContent = 'the shell could not be opened (is the sandbox running?)';
    };
    screen.focus();
  }
  const encoder = new TextEncoder();
  term.onData = (data) => {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data));
  };
  open.addEventListener('click', connect);
  if (s.state === 'running' || s.state === 'paused') connect();
  return () => socket && socket.close();
}

function facts(s, u) {
  const row = (k, v) => el('div', { class: 'fact' }, el('span', { class: 'k', text: k }), el('span', { text: v }));
  const n = s.network || {};
  return el(
    'div',
    { class: 'facts' },
    row('image', s.image),
    row('age', duration(Date.now() - s.created_at_ms)),
    row('TTL left', ttlLeft(s)),
    row('CPU', u ? `${u.cpu_seconds.toFixed(2)} s` : '—'),
    row('memory', u ? `${bytes(u.memory_bytes)} (peak ${bytes(u.peak_memory_bytes)})` : '—'),
    row('disk', u ? bytes(u.disk_bytes) : '—'),
    row('egress', n.mode || 'none'),
    row('limits', [s.cpus ? `${s.cpus} CPUs` : 'no CPU limit', s.memory_bytes ? bytes(s.memory_bytes) : 'no memory limit', s.pids ? `${s.pids} pids` : 'no pid limit'].join(', ')),
    row('landlock', s.landlock || '—'),
    row('owner', s.owner || '—'),
    row('parent', s.parent || '—'),
    row('labels', Object.entries(s.labels || {}).map(([k, v]) => `${k}=${v}`).join(' ') || '—'),
  );
}

export function renderSandbox(root, id, tab) {
  tab = TABS.includes(tab) ? tab : 'execs';
  const head = el('div', { class: 'head' });
  const info = el('div');
  const tabs = el('nav', { class: 'tabs' });
  const panel = el('section', { class: 'panel', id: `panel-${tab}` });
  root.replaceChildren(el('p', {}, el('a', { href: '#/', text: '← all sandboxes' })), head, info, tabs, panel);
  let s = null;
  let removed = false;
  let usage = null;
  let closePanel = () => {};
  const listeners = new Set();

  function drawHead() {
    const extra = [];
    const op = (label, done, route) =>
      el('button', { text: label, 'data-action': label.toLowerCase(), onclick: (e) => act(e.target, `${s.name} ${done}`, () => post(`/v1/sandboxes/${s.id}/${route}`)) });
    if (s && s.state === 'running') extra.push(op('Pause', 'paused', 'pause'), op('Hibernate', 'hibernated', 'hibernate'));
    if (s && s.state === 'paused') extra.push(op('Resume', 'resumed', 'resume'), op('Hibernate', 'hibernated', 'hibernate'));
    if (s && s.state === 'hibernated') extra.push(op('Wake', 'woken', 'wake'));
    head.replaceChildren(
      el('h2', {}, s ? s.name : id, ' ', s ? stateBadge(s.state) : removed ? stateBadge('removed') : ''),
      el('div', { class: 'mono muted', text: s ? s.id : id }),
      s ? el('div', { class: 'bar' }, actions(s, (what) => (what === 'remove' ? load() : undefined)), el('span', { class: 'actions' }, extra)) : '',
    );
    info.replaceChildren(s ? facts(s, usage) : el('p', { class: 'muted', text: removed ? 'This sandbox was removed: its journal, egress log and receipt remain.' : '' }));
    tabs.replaceChildren(
      ...TABS.map((t) => el('a', { href: `#/s/${id}/${t}`, text: t, class: t === tab ? 'on' : '', 'data-tab': t })),
    );
  }

  async function load() {
    try {
      s = await get(`/v1/sandboxes/${id}`);
      usage = s.usage || null;
      removed = false;
    } catch (err) {
      if (!(err instanceof ApiError) || err.status !== 404) return toast(err.message, 'error');
      s = null;
      removed = true;
    }
    drawHead();
    listeners.forEach((f) => f(s));
    return undefined;
  }

  const ctx = {
    id,
    get sandbox() {
      return s;
    },
    get removed() {
      return removed;
    },
    /** Called with the sandbox's record (null once removed) whenever it changes. */
    onChange(f) {
      listeners.add(f);
    },
    /** Called with each lifecycle event of this sandbox. */
    onEvent: null,
  };

  let soon = null;
  const source = events((ev) => {
    if (ev.sandbox !== id && (!s || ev.sandbox !== s.id)) return;
    if (ctx.onEvent) ctx.onEvent(ev);
    clearTimeout(soon);
    soon = setTimeout(load, 100);
  });
  const timer = setInterval(async () => {
    if (!s || s.state !== 'running') return;
    try {
      usage = await get(`/v1/sandboxes/${s.id}/usage`);
      info.replaceChildren(facts(s, usage));
    } catch (_) {
      // The next round tries again.
    }
  }, 2000);

  load().then(() => {
    const sid = s ? s.id : id;
    if (sid === loginSandbox() && tab !== 'receipt') {
      // A session token looks at its own sandbox's record and use only: what runs in it is its own to see.
      panel.replaceChildren(el('p', { class: 'muted', text: 'This is the sandbox this session token belongs to: the token may read its record and use, not its execs, files or logs. Its children, listed on the first page, are open to it.' }));
      return;
    }
    const open = {
      execs: () => execsPanel(panel, ctx, sid),
      terminal: () => (s ? terminalPanel(panel, s) : panel.replaceChildren(el('p', { text: 'No terminal: the sandbox is gone.' }))),
      egress: () => egressPanel(panel, ctx, sid),
      journal: () => journalPanel(panel, ctx, sid),
      files: () => filesPanel(panel, ctx, sid),
      diff: () => diffPanel(panel, ctx, sid),
      previews: () => previewsPanel(panel, ctx, sid),
      receipt: () => receiptPanel(panel, ctx, sid),
    };
    closePanel = open[tab]() || (() => {});
  });
  return () => {
    source.close();
    clearInterval(timer);
    clearTimeout(soon);
    closePanel();
  };
}

