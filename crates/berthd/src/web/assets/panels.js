// The tabs of a sandbox's page, each from the public API: execs (live output, kill), egress (the log as it
// happens, allow and deny), journal (with its verification), files, diff, previews and the receipt.

import { act, bytes, del, download, el, get, post, q, stream, time, toast } from './api.js';

/** Most output held on the page per exec; the log keeps the rest. */
const MAX_SHOWN = 1 << 20;

function result(x) {
  if (x.running) return el('span', { class: 'state running', text: 'running' });
  const r = x.result;
  if (!r) return el('span', { class: 'muted', text: 'ended' });
  let what = `exit ${r.exit_code}`;
  if (r.killed) what = `killed (exit ${r.exit_code})`;
  else if (r.timed_out) what = `timed out (exit ${r.exit_code})`;
  if (r.oom_killed) what += ', out of memory';
  if (r.error) what += `: ${r.error}`;
  return el('span', { class: r.exit_code === 0 ? 'state ok' : 'state failed', text: what });
}

function every(ms, f) {
  f();
  const t = setInterval(f, ms);
  return () => clearInterval(t);
}

export function execsPanel(root, ctx, id) {
  const body = el('tbody', { id: 'execs' });
  const out = el('pre', { class: 'output', id: 'exec-output' });
  const status = el('div', { class: 'bar', id: 'exec-status' });
  const cmd = el('input', { id: 'exec-cmd', placeholder: 'a command, run detached with sh -c', size: 60 });
  const run = el('button', { text: 'Run', id: 'exec-run' });
  const form = el('form', { class: 'inline' }, cmd, run);
  root.replaceChildren(
    form,
    el('table', { class: 'list' }, el('thead', {}, el('tr', {}, ['Exec', 'Command', 'Started', 'State', ''].map((h) => el('th', { text: h })))), body),
    status,
    out,
  );
  let execs = [];
  let selected = null;
  let reading = null;
  let shown = 0;

  function draw() {
    body.replaceChildren(
      ...execs.map((x) => {
        const kill = x.running
          ? el('button', {
              class: 'danger',
              text: 'Kill',
              'data-kill': x.exec_id,
              onclick: (e) => {
                e.stopPropagation();
                act(e.target, `killed ${x.exec_id}`, () => del(`/v1/sandboxes/${id}/execs/${x.exec_id}`)).then(refresh);
              },
            })
          : '';
        return el(
          'tr',
          { 'data-exec': x.exec_id, class: x.exec_id === selected ? 'selected' : '', onclick: () => select(x.exec_id) },
          el('td', { class: 'mono', text: x.exec_id }),
          el('td', { class: 'mono cmd', text: x.argv.join(' ') }),
          el('td', { text: time(x.started_at_ms) }),
          el('td', {}, result(x)),
          el('td', {}, kill),
        );
      }),
    );
    const x = execs.find((e) => e.exec_id === selected);
    status.replaceChildren(
      ...(x
        ? [
            el('strong', { text: `${x.exec_id}: ` }),
            result(x),
            el('button', { text: 'Download log', onclick: () => download(`/v1/sandboxes/${id}/execs/${x.exec_id}/log`, `${id}-${x.exec_id}.log`) }),
          ]
        : [el('span', { class: 'muted', text: 'Choose an exec to see its output as it comes.' })]),
    );
  }

  async function refresh() {
    try {
      execs = (await get(`/v1/sandboxes/${id}/execs`)).sort((a, b) => b.started_at_ms - a.started_at_ms);
      draw();
    } catch (err) {
      if (!ctx.removed) toast(err.message, 'error');
    }
  }

  function select(execId) {
    if (reading) reading.abort();
    selected = execId;
    out.replaceChildren();
    shown = 0;
    draw();
    const abort = new AbortController();
    reading = abort;
    stream(
      `/v1/sandboxes/${id}/execs/${execId}/log?follow=true`,
      (text) => {
        if (!text) return;
        const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
        out.append(text);
        shown += text.length;
        while (shown > MAX_SHOWN && out.firstChild) {
          shown -= out.firstChild.textContent.length;
          out.firstChild.remove();
        }
        if (atEnd) out.scrollTop = out.scrollHeight;
      },
      abort.signal,
    )
      .then(refresh)
      .catch((err) => {
        if (err.name !== 'AbortError') toast(err.message, 'error');
      });
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!cmd.value.trim()) return;
    const started = await act(run, null, () =>
      post(`/v1/sandboxes/${id}/execs`, { argv: ['sh', '-c', cmd.value], detach: true }),
    );
    if (started) {
      cmd.value = '';
      await refresh();
      select(started.exec_id);
    }
  });
  ctx.onEvent = (ev) => {
    if (ev.exec_id) refresh();
  };
  refresh();
  return () => reading && reading.abort();
}

export function egressPanel(root, ctx, id) {
  const policy = el('div', { class: 'policy', id: 'egress-policy' });
  const rule = el('input', { id: 'egress-rule', placeholder: 'a rule: host, host:port or *.domain', size: 40 });
  const allow = el('button', { text: 'Allow', id: 'egress-allow', type: 'button' });
  const deny = el('button', { text: 'Deny', id: 'egress-deny', type: 'button', class: 'danger' });
  const body = el('tbody', { id: 'egress-log' });
  root.replaceChildren(
    policy,
    el('form', { class: 'inline' }, rule, allow, deny),
    el('table', { class: 'list' }, el('thead', {}, el('tr', {}, ['Time', 'Exec', 'Method', 'Destination', 'Verdict', 'Rule', 'Reason', 'Up', 'Down'].map((h) => el('th', { text: h })))), body),
  );
  function drawPolicy(s) {
    const n = (s && s.network) || {};
    const list = (xs) => (xs && xs.length ? xs.join(', ') : 'none');
    policy.replaceChildren(
      el('div', {}, el('strong', { text: 'mode ' }), n.mode || (s ? 'none' : '—')),
      el('div', {}, el('strong', { text: 'allow ' }), list(n.allow)),
      el('div', {}, el('strong', { text: 'deny ' }), list(n.deny)),
    );
  }
  const change = (button, field) => async () => {
    const r = rule.value.trim();
    if (!r) return;
    const changed = await act(button, `${field === 'allow' ? 'allowed' : 'denied'} ${r}`, () =>
      post(`/v1/sandboxes/${id}/net`, { [field]: [r] }),
    );
    if (changed) {
      rule.value = '';
      drawPolicy({ network: changed.network });
      if (changed.closed) toast(`closed ${changed.closed} connection(s) the new rule forbids`, 'ok');
    }
  };
  allow.addEventListener('click', change(allow, 'allow'));
  deny.addEventListener('click', change(deny, 'deny'));
  drawPolicy(ctx.sandbox);
  ctx.onChange(drawPolicy);
  let count = -1;
  return every(1500, async () => {
    let log;
    try {
      log = await get(`/v1/sandboxes/${id}/net/log`);
    } catch (_) {
      return;
    }
    if (log.length === count) return;
    count = log.length;
    body.replaceChildren(
      ...log
        .slice(-500)
        .reverse()
        .map((r) =>
          el(
            'tr',
            { class: `verdict-${r.verdict}`, 'data-host': r.host },
            el('td', { text: time(r.time_ms) }),
            el('td', { class: 'mono', text: r.exec || '—' }),
            el('td', { text: r.method }),
            el('td', { class: 'mono', text: `${r.host}:${r.port}` }),
            el('td', {}, el('span', { class: `state ${r.verdict === 'allowed' ? 'ok' : 'failed'}`, text: r.verdict })),
            el('td', { class: 'mono', text: r.rule || '—' }),
            el('td', { text: r.reason }),
            el('td', { class: 'num', text: bytes(r.bytes_up) }),
            el('td', { class: 'num', text: bytes(r.bytes_down) }),
          ),
        ),
    );
  });
}

function brief(v) {
  const s = JSON.stringify(v);
  return s.length > 160 ? `${s.slice(0, 157)}…` : s;
}

export function journalPanel(root, ctx, id) {
  const verdict = el('div', { class: 'bar', id: 'journal-verify' });
  const body = el('tbody', { id: 'journal' });
  const check = el('button', { text: 'Verify again' });
  root.replaceChildren(
    el('div', { class: 'bar' }, check, verdict),
    el('table', { class: 'list' }, el('thead', {}, el('tr', {}, ['#', 'Time', 'Actor', 'Action', 'Args', 'Result'].map((h) => el('th', { text: h })))), body),
  );
  async function verify() {
    try {
      const v = await get(`/v1/sandboxes/${id}/journal?verify=true`);
      verdict.replaceChildren(
        v.ok
          ? el('span', { class: 'state ok', text: `verified: ${v.records} records, chain intact` })
          : el('span', { class: 'state failed', text: `broken at line ${v.first_bad[0]}: ${v.first_bad[1]} (${v.records} records check out before it)` }),
      );
    } catch (err) {
      verdict.replaceChildren(el('span', { class: 'state failed', text: err.message }));
    }
  }
  let count = -1;
  async function load() {
    let records;
    try {
      records = await get(`/v1/sandboxes/${id}/journal`);
    } catch (err) {
      toast(err.message, 'error');
      return;
    }
    if (records.length === count) return;
    count = records.length;
    body.replaceChildren(
      ...records
        .slice(-500)
        .reverse()
        .map((r) =>
          el(
            'tr',
            { 'data-action': r.action },
            el('td', { class: 'num', text: r.seq }),
            el('td', { text: time(r.time_ms) }),
            el('td', { class: 'mono', text: r.actor }),
            el('td', { text: r.action }),
            el('td', { class: 'mono', text: brief(r.args) }),
            el('td', { class: 'mono', text: brief(r.result) }),
          ),
        ),
    );
    verify();
  }
  check.addEventListener('click', verify);
  ctx.onEvent = load;
  return every(4000, load);
}

export function filesPanel(root, ctx, id) {
  let path = '/workspace';
  const crumbs = el('div', { class: 'bar crumbs', id: 'files-path' });
  const body = el('tbody', { id: 'files' });
  const view = el('div', { id: 'file-view' });
  root.replaceChildren(
    crumbs,
    el('table', { class: 'list' }, el('thead', {}, el('tr', {}, ['Name', 'Kind', 'Size', 'Mode', 'Modified'].map((h) => el('th', { text: h })))), body),
    view,
  );
  const join = (dir, name) => (dir === '/' ? `/${name}` : `${dir}/${name}`);
  function drawCrumbs() {
    const parts = path.split('/').filter(Boolean);
    const links = [el('a', { href: '#', text: '/', onclick: (e) => (e.preventDefault(), open('/')) })];
    parts.forEach((p, i) => {
      const to = `/${parts.slice(0, i + 1).join('/')}`;
      links.push(el('a', { href: '#', text: `${p}/`, onclick: (e) => (e.preventDefault(), open(to)) }));
    });
    const tar = el('button', { text: 'Download as tar', onclick: () => download(q(`/v1/sandboxes/${id}/archive`, { path }), 'files.tar') });
    crumbs.replaceChildren(...links, tar);
  }
  async function show(file, entry) {
    const save = el('button', { text: 'Download', id: 'file-download', onclick: () => download(q(`/v1/sandboxes/${id}/files`, { path: file }), entry.name) });
    const head = el('div', { class: 'bar' }, el('strong', { class: 'mono', text: file }), ` ${bytes(entry.size)} `, save);
    if (entry.size > MAX_SHOWN) return view.replaceChildren(head, el('p', { class: 'muted', text: 'Too large to show here: download it.' }));
    try {
      const r = await get(q(`/v1/sandboxes/${id}/files`, { path: file }), { raw: true });
      const data = new Uint8Array(await r.arrayBuffer());
      let text;
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(data);
      } catch (_) {
        return view.replaceChildren(head, el('p', { class: 'muted', text: 'A binary file: download it.' }));
      }
      return view.replaceChildren(head, el('pre', { class: 'output', id: 'file-text', text }));
    } catch (err) {
      return toast(err.message, 'error');
    }
  }
  async function open(to) {
    try {
      const entries = await get(q(`/v1/sandboxes/${id}/files`, { path: to }));
      path = to;
      drawCrumbs();
      view.replaceChildren();
      entries.sort((a, b) => (a.kind === 'directory') === (b.kind === 'directory') ? a.name.localeCompare(b.name) : a.kind === 'directory' ? -1 : 1);
      body.replaceChildren(
        ...entries.map((f) =>
          el(
            'tr',
            { 'data-name': f.name },
            el('td', {}, el('a', { href: '#', class: 'mono', text: f.kind === 'directory' ? `${f.name}/` : f.name, onclick: (e) => {
              e.preventDefault();
              if (f.kind === 'directory') open(join(path, f.name));
              else show(join(path, f.name), f);
            } })),
            el('td', { text: f.kind === 'symlink' ? `→ ${f.link_target}` : f.kind }),
            el('td', { class: 'num', text: f.kind === 'file' ? bytes(f.size) : '' }),
            el('td', { class: 'mono', text: (f.mode & 0o7777).toString(8).padStart(4, '0') }),
            el('td', { text: new Date(f.mtime_ms).toLocaleString() }),
          ),
        ),
      );
    } catch (err) {
      toast(err.message, 'error');
    }
  }
  open(path);
  return () => {};
}

export function diffPanel(root, ctx, id) {
  const against = el('select', { id: 'diff-against' }, el('option', { value: '', text: 'its parent, or its image' }), el('option', { value: 'image', text: 'its image' }));
  const patch = el('button', { text: 'Show as a patch', id: 'diff-patch' });
  const body = el('tbody', { id: 'diff' });
  const text = el('pre', { class: 'output', hidden: true });
  const summary = el('span', { class: 'muted' });
  root.replaceChildren(
    el('div', { class: 'bar' }, 'compared with ', against, patch, summary),
    el('table', { class: 'list' }, el('thead', {}, el('tr', {}, ['Change', 'Path', 'Before', 'After'].map((h) => el('th', { text: h })))), body),
    text,
  );
  const state = (x) => (x ? `${x.type} ${(x.mode & 0o7777).toString(8)} ${x.type === 'file' ? bytes(x.size) : x.symlink_target || ''}` : '—');
  async function load() {
    try {
      const d = await get(q(`/v1/sandboxes/${id}/diff`, { against: against.value }));
      text.hidden = true;
      summary.textContent = `${d.changes.length} change(s) against ${d.against}`;
      body.replaceChildren(
        ...d.changes.map((c) =>
          el('tr', { class: `change-${c.kind}` }, el('td', { text: c.kind }), el('td', { class: 'mono', text: c.path }), el('td', { text: state(c.old) }), el('td', { text: state(c.new) })),
        ),
      );
    } catch (err) {
      summary.textContent = err.message;
    }
  }
  patch.addEventListener('click', async () => {
    const p = await act(patch, null, () => get(q(`/v1/sandboxes/${id}/diff`, { against: against.value, format: 'patch' })));
    if (p !== undefined) {
      text.textContent = p || '(no changes a patch can show)';
      text.hidden = false;
    }
  });
  against.addEventListener('change', load);
  load();
  return () => {};
}

export function previewsPanel(root, ctx, id) {
  const port = el('input', { id: 'preview-port', placeholder: 'port', size: 6 });
  const ttl = el('input', { id: 'preview-ttl', placeholder: 'TTL (1h, 30m; optional)', size: 20 });
  const pub = el('input', { id: 'preview-public', type: 'checkbox' });
  const make = el('button', { text: 'Expose', id: 'preview-make' });
  const made = el('div', { id: 'preview-made' });
  const body = el('tbody', { id: 'previews' });
  const form = el('form', { class: 'inline' }, port, ttl, el('label', {}, pub, ' public (no token)'), make);
  root.replaceChildren(
    form,
    made,
    el('table', { class: 'list' }, el('thead', {}, el('tr', {}, ['Port', 'Access', 'URL', 'Expires', ''].map((h) => el('th', { text: h })))), body),
  );
  const link = (url) => el('a', { href: url, text: url, target: '_blank', rel: 'noopener noreferrer' });
  async function load() {
    let list;
    try {
      list = await get(`/v1/sandboxes/${id}/previews`);
    } catch (err) {
      if (!ctx.removed) toast(err.message, 'error');
      return;
    }
    body.replaceChildren(
      ...list.map((p) =>
        el(
          'tr',
          { 'data-port': p.port },
          el('td', { class: 'num', text: p.port }),
          el('td', { text: p.public ? 'public' : 'token' }),
          el('td', { class: 'mono' }, p.public ? link(p.url) : p.url, p.host_url ? el('div', { text: p.host_url }) : ''),
          el('td', { text: p.expires_at_ms ? new Date(p.expires_at_ms).toLocaleString() : 'never' }),
          el('td', {}, el('button', { class: 'danger', text: 'Remove', onclick: (e) => act(e.target, `removed the preview of port ${p.port}`, () => del(`/v1/sandboxes/${id}/previews/${p.id}`)).then(load) })),
        ),
      ),
    );
  }
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const seconds = (t) => {
      const m = /^(\d+(?:\.\d+)?)([smhd]?)$/.exec(t.trim());
      if (!m) return undefined;
      return Number(m[1]) * { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2]];
    };
    const req = { port: Number(port.value), public: pub.checked };
    if (ttl.value.trim()) {
      req.ttl_seconds = seconds(ttl.value);
      if (req.ttl_seconds === undefined) return toast(`${ttl.value} is not a TTL: write 90, 30m, 1h or 2d`, 'error');
    }
    const p = await act(make, null, () => post(`/v1/sandboxes/${id}/previews`, req));
    if (p) {
      made.replaceChildren(el('p', {}, `Port ${p.port} is at `, link(p.url), p.public ? '' : ' (its token is in the link: share it with care)'));
      load();
    }
    return undefined;
  });
  load();
  return () => {};
}

export function receiptPanel(root, ctx, id) {
  async function draw() {
    if (!ctx.removed) {
      root.replaceChildren(el('p', { class: 'muted', text: 'The receipt is written when the sandbox is removed: it says what its teardown did, in order, and what (if anything) was left.' }));
      return;
    }
    let r;
    try {
      r = await get(`/v1/sandboxes/${id}/receipt`);
    } catch (err) {
      root.replaceChildren(el('p', { text: err.message }));
      return;
    }
    const list = (xs, f) => (xs && xs.length ? el('ul', {}, xs.map((x) => el('li', { text: f ? f(x) : x }))) : el('p', { class: 'muted', text: 'none' }));
    root.replaceChildren(
      el('div', { class: 'bar', id: 'receipt' }, el('span', { class: r.clean ? 'state ok' : 'state failed', text: r.clean ? 'clean: nothing left behind' : 'not clean' }), ` reason: ${r.reason}, ${time(r.started_at_ms)} to ${time(r.finished_at_ms)}`),
      el('h3', { text: 'Steps' }),
      list(r.steps),
      el('h3', { text: 'Left behind' }),
      list(r.leftovers),
      el('h3', { text: 'Outputs' }),
      list(r.outputs, (o) => `${o.path} → ${o.saved_as} (${bytes(o.bytes)}, sha256 ${o.sha256.slice(0, 12)}…)`),
      el('h3', { text: 'Revoked' }),
      list(r.revoked),
      r.usage ? el('p', { text: `Used: ${r.usage.cpu_seconds.toFixed(2)} CPU seconds, peak memory ${bytes(r.usage.peak_memory_bytes)}, ${r.usage.execs} execs.` }) : '',
    );
  }
  ctx.onChange(() => draw());
  draw();
  return () => {};
}
