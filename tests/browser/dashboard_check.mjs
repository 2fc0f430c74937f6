// Drives headless Chromium against a running router's /dashboard (tests/dashboard.rs runs it).
//
//   node tests/browser/dashboard_check.mjs <router-url> <screenshot.png>
//
// Fails (exit 1, with the reasons) when the page logs a console error or warning, throws, gets
// an HTTP error for anything it loads, misses a configured task, never goes live, or when the
// total request count (#requests-total, its data-value) does not rise over a few seconds of
// traffic, or when the provider table does not show claude passing summarize's gate. Saves a full-page screenshot either way, once the page has loaded.
// Chromium: $CHROMIUM, else /usr/bin/chromium (Debian package `chromium`); nothing is downloaded.
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';

const [base, screenshot] = process.argv.slice(2);
if (!base || !screenshot) {
  console.error('usage: node dashboard_check.mjs <router-url> <screenshot.png>');
  process.exit(2);
}
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!existsSync(executablePath)) {
  console.error(`no Chromium at ${executablePath}: install the Debian package chromium or set CHROMIUM`);
  process.exit(2);
}
const GAP_MS = 4000; // between the two reads of the request count
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const problems = [];
const log = (line) => console.log(line);

const resp = await fetch(`${base}/dashboard/data`);
if (!resp.ok) {
  console.error(`GET /dashboard/data: HTTP ${resp.status}`);
  process.exit(1);
}
const taskNames = (await resp.json()).tasks.map((t) => t.name);
log(`configured tasks: ${taskNames.join(', ')}`);

const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'], headless: true });
let page = null;
try {
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} (${r.failure()?.errorText})`));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });

  const nav = await page.goto(`${base}/dashboard`, { waitUntil: 'load' });
  if (!nav || !nav.ok()) throw new Error(`GET /dashboard: HTTP ${nav && nav.status()}`);
  await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, {
    timeout: 15000,
  });

  // Every configured task has a card, titled with its name.
  const cards = await page.$$eval('[data-task]', (els) =>
    els.map((e) => ({ task: e.dataset.task, title: e.querySelector('h3').textContent })),
  );
  for (const name of taskNames) {
    const card = cards.find((c) => c.task === name);
    if (!card) problems.push(`no card for task ${name}`);
    else if (card.title !== name) problems.push(`card of ${name} is titled ${card.title}`);
  }
  log(`task cards: ${cards.map((c) => c.task).join(', ')}`);

  // Traffic flows: the total request count rises between two reads.
  const total = () => page.$eval('#requests-total', (e) => Number(e.dataset.value));
  const first = await total();
  await sleep(GAP_MS);
  const second = await total();
  log(`requests total: ${first} then ${second} after ${GAP_MS} ms`);
  if (!(Number.isFinite(first) && Number.isFinite(second) && second > first)) {
    problems.push(`#requests-total did not rise: ${first} then ${second}`);
  }

  // The charts have drawn lines by now (several polls), and the node table has rows.
  const lines = await page.$$eval('[data-task] svg polyline', (els) => els.length);
  const shareLines = await page.$$eval('#chart-share polyline', (els) => els.length);
  const nodes = await page.$$eval('#nodes tbody tr', (els) => els.length);
  const backends = await page.$$eval('#backends tbody tr', (els) => els.length);
  log(`task chart lines: ${lines}, traffic lines: ${shareLines}, node rows: ${nodes}, provider rows: ${backends}`);
  if (lines === 0) problems.push('no TTFT line drawn on any task card');
  if (shareLines === 0) problems.push('no local/hosted traffic line drawn');
  if (nodes === 0) problems.push('the node table is empty');
  if (backends === 0) problems.push('the provider table is empty');
  const gate = await page.$eval('#backends tr[data-backend="claude"] [data-field="gate"]', (e) => e.textContent);
  log(`claude's gate cell: ${gate}`);
  if (!gate.includes('summarize pass')) problems.push(`claude's gate cell says ${JSON.stringify(gate)}, not "summarize pass"`);
} catch (e) {
  problems.push(`check failed: ${e && e.message ? e.message : e}`);
} finally {
  if (page) {
    await page.screenshot({ path: screenshot, fullPage: true }).then(
      () => log(`screenshot: ${screenshot}`),
      (e) => problems.push(`screenshot failed: ${e.message}`),
    );
  }
  await browser.close();
}

if (problems.length > 0) {
  console.error(`dashboard check FAILED:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
log('dashboard check passed: no console errors or warnings, every task shown, requests rising');
