// berth's context driver for JavaScript: one long-lived Node.js realm inside a sandbox.
//
// The same protocol as the Python driver: <id>.sock takes one run per connection, <id>.ctl answers control
// requests even while code runs. The control socket is served by a worker thread, so an interrupt reaches a
// busy loop: the worker signals this process, and code run with breakOnSigint stops.
const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
const vm = require('vm');
const { Worker } = require('worker_threads');

const dir = process.env.BERTH_CONTEXT_DIR;
const ctx = process.env.BERTH_CONTEXT_ID;
for (const k of ['BERTH_CONTEXT_DIR', 'BERTH_CONTEXT_ID', 'BERTH_CONTEXT_LANGUAGE', 'BERTH_DRIVER']) {
  delete process.env[k];
}
fs.mkdirSync(dir, { recursive: true, mode: 0o700 });

// shared[0]: busy, shared[1]: execution count.
const shared = new Int32Array(new SharedArrayBuffer(8));
let sink = null;
let held = [];
let heldBytes = 0;

function send(frame) {
  const line = JSON.stringify(frame) + '\n';
  if (sink === null) {
    if ((frame.type === 'stdout' || frame.type === 'stderr') && heldBytes < 65536) {
      held.push(line);
      heldBytes += line.length;
    }
    return;
  }
  sink.write(line);
}

for (const [stream, type] of [[process.stdout, 'stdout'], [process.stderr, 'stderr']]) {
  stream.write = (chunk, encoding, cb) => {
    const data = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    send({ type, data });
    if (typeof encoding === 'function') encoding();
    else if (typeof cb === 'function') cb();
    return true;
  };
}

globalThis.require = require;
globalThis.display = (...values) => {
  for (const v of values) send({ type: 'result', is_main: false, data: bundle(v) });
};

function bundle(value) {
  const data = { 'text/plain': util.inspect(value) };
  if (value !== null && typeof value === 'object' && (Array.isArray(value) || Object.getPrototypeOf(value) === Object.prototype)) {
    try {
      const text = JSON.stringify(value);
      if (text !== undefined && text.length <= 1 << 20) data['application/json'] = JSON.parse(text);
    } catch (_) {
      // Not JSON (a cycle, a BigInt): text/plain only.
    }
  }
  return data;
}

// A stack as far as the code's own frames: what the driver and vm add below them is noise.
function ownStack(stack) {
  const lines = String(stack || '').split('\n');
  const cut = lines.findIndex((l) => /node:vm|sigintHandlersWrap|\[eval\]/.test(l));
  return (cut < 0 ? lines : lines.slice(0, cut)).join('\n');
}

function errorFrame(e) {
  if (e instanceof Error || (e && typeof e === 'object' && 'message' in e)) {
    return { type: 'error', name: e.name || 'Error', value: String(e.message), traceback: ownStack(e.stack) };
  }
  return { type: 'error', name: 'Thrown', value: util.inspect(e), traceback: '' };
}

// An interrupt while the code awaits something: the run's promise loses the race.
let onInterrupt = null;
process.on('SIGINT', () => {
  if (onInterrupt) onInterrupt();
});

async function run(code, count) {
  const filename = `<cell ${count}>`;
  let script;
  try {
    script = new vm.Script(code, { filename });
  } catch (e) {
    if (!(e instanceof SyntaxError) || !/await/.test(code)) {
      send(errorFrame(e));
      return false;
    }
    // Top-level await: run the code as an async function (its declarations are then its own), returning
    // its last line when that is an expression.
    script = null;
    const lines = code.replace(/\s+$/, '').split('\n');
    const last = lines[lines.length - 1];
    if (!/^\s*(let|const|var|if|for|while|do|try|return|function|class|switch|throw|import|export|\}|\/\/)/.test(last)) {
      const body = lines.slice(0, -1).join('\n') + `\nreturn (${last.replace(/;\s*$/, '')});`;
      try {
        script = new vm.Script(`(async () => {\n${body}\n})()`, { filename, lineOffset: -1 });
      } catch (_) {
        script = null;
      }
    }
    if (script === null) {
      try {
        script = new vm.Script(`(async () => {\n${code}\n})()`, { filename, lineOffset: -1 });
      } catch (e2) {
        send(errorFrame(e2));
        return false;
      }
    }
  }
  let interrupted = false;
  try {
    let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
    if (value instanceof Promise) {
      value = await Promise.race([
        value,
        new Promise((_, reject) => {
          onInterrupt = () => {
            const e = new Error('the run was interrupted');
            e.name = 'Interrupted';
            reject(e);
          };
        }),
      ]);
    }
    if (value !== undefined) {
      globalThis._ = value;
      send({ type: 'result', is_main: true, data: bundle(value) });
    }
  } catch (e) {
    if (e && (e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED' || e.name === 'Interrupted')) {
      interrupted = true;
      send({ type: 'error', name: 'Interrupted', value: 'the run was interrupted', traceback: '' });
    } else {
      send(errorFrame(e));
    }
  } finally {
    onInterrupt = null;
  }
  return interrupted;
}

function listen(name, onConnection, onListening) {
  const p = path.join(dir, name);
  try {
    fs.unlinkSync(p);
  } catch (_) {
    // Not there.
  }
  const server = net.createServer(onConnection);
  server.listen(p, () => {
    fs.chmodSync(p, 0o600);
    onListening();
  });
  return server;
}

let running = false;
listen(`${ctx}.sock`, (conn) => {
  let buf = '';
  conn.on('error', () => {});
  conn.on('data', async (chunk) => {
    buf += chunk.toString('utf8');
    if (!buf.endsWith('\n') || running) return;
    running = true;
    let req = {};
    try {
      req = JSON.parse(buf);
    } catch (_) {
      req = { code: '' };
    }
    sink = conn;
    for (const line of held) conn.write(line);
    held = [];
    heldBytes = 0;
    const count = Atomics.add(shared, 1, 1) + 1;
    Atomics.store(shared, 0, 1);
    // This run's variables, put back as they were after it.
    const env = req.env && typeof req.env === 'object' ? req.env : {};
    const saved = Object.keys(env).map((k) => [k, Object.prototype.hasOwnProperty.call(process.env, k), process.env[k]]);
    for (const [k, v] of Object.entries(env)) process.env[k] = String(v);
    let interrupted;
    try {
      interrupted = await run(String(req.code || ''), count);
    } finally {
      for (const [k, had, v] of saved) {
        if (had) process.env[k] = v;
        else delete process.env[k];
      }
    }
    Atomics.store(shared, 0, 0);
    send({ type: 'end', execution_count: count, interrupted });
    sink = null;
    running = false;
    conn.end();
  });
}, startControl);

const controlSource = `
const net = require('net');
const { workerData } = require('worker_threads');
const shared = workerData.shared;
net.createServer((conn) => {
  let buf = '';
  conn.on('error', () => {});
  conn.on('data', (chunk) => {
    buf += chunk.toString('utf8');
    if (!buf.endsWith('\\n')) return;
    let req = {};
    try { req = JSON.parse(buf); } catch (_) {}
    let reply;
    if (req.op === 'interrupt') {
      const busy = Atomics.load(shared, 0) === 1;
      if (busy) process.kill(process.pid, 'SIGINT');
      reply = { interrupted: busy };
    } else if (req.op === 'exit') {
      for (const p of [workerData.path, workerData.path.replace(/\.ctl$/, '.sock')]) {
        try { require('fs').unlinkSync(p); } catch (_) {}
      }
      process.kill(process.pid, 'SIGKILL');
      return;
    } else {
      reply = { busy: Atomics.load(shared, 0) === 1, execution_count: Atomics.load(shared, 1), pid: process.pid };
    }
    conn.end(JSON.stringify(reply) + '\\n');
  });
}).listen(workerData.path);
`;
const ctlPath = path.join(dir, `${ctx}.ctl`);
try {
  fs.unlinkSync(ctlPath);
} catch (_) {
  // Not there.
}
// Started once the run socket is served: the daemon takes an answer on the control socket to mean both are.
function startControl() {
  new Worker(controlSource, { eval: true, workerData: { shared, path: ctlPath } }).unref();
}
