// Drives the web view in headless Chromium as a person would: log in, watch an exec's output come, kill it,
// type into a terminal, see a denied egress attempt and the journal's verification. Prints one JSON object
// of what it saw; exits non-zero with the reason when a step does not happen.
//
// Env: BERTH_URL (the daemon's listener), BERTH_TOKEN, BERTH_SANDBOX (its id), BERTH_EXEC (a running exec
// that prints "tick N" lines), CHROMIUM (the browser), NPM_DIR (where playwright-core is installed), SHOTS (a
// directory for screenshots, optional).
import { createRequire } from 'node:module';

const { chromium } = createRequire(`${process.env.NPM_DIR}/`)('playwright-core');

const { BERTH_URL, BERTH_TOKEN, BERTH_SANDBOX, BERTH_EXEC, CHROMIUM, SHOTS } = process.env;
const seen = {};
const STEP_MS = 30000;

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));
page.on('dialog', (d) => d.accept());
const shot = async (name) => {
  if (SHOTS) await page.screenshot({ path: `${SHOTS}/${name}.png` });
};
const step = async (name, f) => {
  try {
    return await f();
  } catch (err) {
    console.error(`step "${name}" failed: ${err.message}`);
    console.error(`page text: ${(await page.textContent('body').catch(() => '')).slice(0, 3000)}`);
    if (errors.length) console.error(`page errors: ${errors.join('\n')}`);
    await browser.close();
    process.exit(1);
  }
};
const waitText = (selector, pattern) =>
  page.waitForFunction(
    ([s, p]) => new RegExp(p).test((document.querySelector(s) || {}).textContent || ''),
    [selector, pattern],
    { timeout: STEP_MS },
  );

await step('a wrong token is refused', async () => {
  await page.goto(BERTH_URL);
  await page.fill('#token', 'berth_not-a-token');
  await page.click('#login');
  await waitText('#login-error', 'not a token');
  seen.refused = await page.textContent('#login-error');
});

await step('log in', async () => {
  await page.fill('#token', BERTH_TOKEN);
  await page.click('#login');
  await page.waitForSelector(`#sandboxes tr[data-id="${BERTH_SANDBOX}"]`, { timeout: STEP_MS });
  // The CPU and memory columns fill from the second usage sample.
  await page.waitForFunction(
    (id) => /%/.test(document.querySelector(`tr[data-id="${id}"]`).textContent),
    BERTH_SANDBOX,
    { timeout: STEP_MS },
  );
  seen.listed = (await page.textContent(`tr[data-id="${BERTH_SANDBOX}"]`)).replace(/\s+/g, ' ');
  await shot('list');
});

await step("watch an exec's output appear live", async () => {
  await page.click(`tr[data-id="${BERTH_SANDBOX}"] a`);
  await page.click(`tr[data-exec="${BERTH_EXEC}"]`);
  await waitText('#exec-output', 'tick \\d+\\n');
  const first = await page.textContent('#exec-output');
  const last = Number(first.trim().split('\n').pop().split(' ')[1]);
  // More arrives while the page is open: the stream is live, not a copy of what was there.
  await waitText('#exec-output', `tick ${last + 2}\\n`);
  seen.ticks_first = last;
  seen.ticks_later = Number((await page.textContent('#exec-output')).trim().split('\n').pop().split(' ')[1]);
  await shot('exec');
});

await step('stop a running exec', async () => {
  await page.click(`button[data-kill="${BERTH_EXEC}"]`);
  await waitText(`tr[data-exec="${BERTH_EXEC}"]`, 'killed');
  seen.killed = (await page.textContent(`tr[data-exec="${BERTH_EXEC}"]`)).replace(/\s+/g, ' ');
});

await step('open a terminal and type a command', async () => {
  await page.click('a[data-tab="terminal"]');
  await waitText('#terminal-status', 'connected: exec');
  await page.click('#terminal');
  await page.keyboard.type('echo answer=$((6*7))');
  await page.keyboard.press('Enter');
  await waitText('#terminal', 'answer=42');
  seen.terminal = (await page.textContent('#terminal-status'));
  await shot('terminal');
});

await step('see a denied egress attempt appear', async () => {
  // The page holds its key in memory only: nothing of the login is in the origin's storage.
  seen.stored = await page.evaluate(() => [...Object.keys(sessionStorage), ...Object.keys(localStorage)]);
  seen.cookie_readable = await page.evaluate(() => document.cookie);
  // An exec that tries to get out, run from the execs tab; the egress tab shows the proxy's refusal.
  await page.click('a[data-tab="execs"]');
  await page.fill('#exec-cmd', 'curl -sS http://blocked.example/ || true');
  await page.click('#exec-run');
  await waitText('#exec-output', 'denied');
  await page.click('a[data-tab="egress"]');
  await page.waitForSelector('#egress-log tr.verdict-denied[data-host="blocked.example"]', { timeout: STEP_MS });
  seen.egress = (await page.textContent('#egress-log tr.verdict-denied')).replace(/\s+/g, ' ');
  await page.fill('#egress-rule', 'pypi.org:443');
  await page.click('#egress-allow');
  await waitText('#egress-policy', 'pypi.org:443');
  seen.policy = (await page.textContent('#egress-policy')).replace(/\s+/g, ' ');
  await shot('egress');
});

await step('the journal and its verification', async () => {
  await page.click('a[data-tab="journal"]');
  await waitText('#journal-verify', 'verified');
  seen.journal = await page.textContent('#journal-verify');
  seen.journal_kill = await page.locator('#journal tr[data-action="kill"]').count();
  await shot('journal');
});

await step('the files', async () => {
  await page.click('a[data-tab="files"]');
  await page.click('#files tr[data-name="notes.txt"] a');
  await waitText('#file-text', 'written by the test');
  seen.file = await page.textContent('#file-text');
  // Into a directory and back out by its path.
  await page.click('#files tr[data-name="sub"] a');
  await page.click('#files tr[data-name="inner.txt"] a');
  await waitText('#file-text', 'one level down');
  seen.inner = await page.textContent('#file-text');
  await page.click('#files-path a:nth-child(1)');
  await page.waitForSelector('#files tr[data-name="workspace"]', { timeout: STEP_MS });
  await shot('files');
});

await step('the diff', async () => {
  await page.click('a[data-tab="diff"]');
  await waitText('#diff', 'notes.txt');
  seen.diff = (await page.textContent('#diff')).replace(/\s+/g, ' ');
});

await step('remove it and read its receipt', async () => {
  await page.click('a[data-tab="receipt"]');
  await page.click('button[data-action="remove"]');
  await waitText('#receipt', 'clean');
  seen.receipt = (await page.textContent('#receipt')).replace(/\s+/g, ' ');
  await shot('receipt');
});

seen.page_errors = errors;
console.log(JSON.stringify(seen));
await browser.close();
