// A smoke test of E2B's JavaScript SDK (`e2b` from npm, pinned in scripts/setup) against berth's
// --e2b-listen: create, a command, a file, a background command killed, list, kill. Prints one JSON object of
// what it saw; exits non-zero with the reason when a step fails. Env: as the Python suite's, plus NPM_DIR.
import { createRequire } from 'node:module';

const { Sandbox } = createRequire(`${process.env.NPM_DIR}/`)('e2b');
const seen = {};
const sb = await Sandbox.create('base', { metadata: { smoke: 'js' } });
try {
  seen.id = sb.sandboxId;
  const r = await sb.commands.run('echo from-js; echo err >&2; pwd; whoami');
  seen.stdout = r.stdout;
  seen.stderr = r.stderr;
  seen.exit = r.exitCode;
  await sb.files.write('js/hello.txt', 'written by js');
  seen.file = await sb.files.read('js/hello.txt');
  seen.exists = await sb.files.exists('js/hello.txt');
  seen.owner = (await sb.files.getInfo('js/hello.txt')).owner;
  seen.root = (await sb.commands.run('whoami', { user: 'root' })).stdout;
  const h = await sb.commands.run('sleep 60', { background: true });
  seen.killed = await sb.commands.kill(h.pid);
  try {
    await sb.commands.run('exit 4');
  } catch (e) {
    seen.failed = e.exitCode;
  }
  const listed = await Sandbox.list({ query: { metadata: { smoke: 'js' } } }).nextItems();
  seen.listed = listed.map((s) => s.sandboxId);
  seen.running = await sb.isRunning();
} finally {
  seen.kill = await sb.kill();
}
seen.after = await Sandbox.kill(seen.id);
console.log(JSON.stringify(seen));
