// Drives headless Chromium against a running router's /dashboard (tests/operations/dashboard.rs runs it).
//
//   node tests/browser/dashboard_check.mjs <router-url> <screenshot.png> [admin-token]
//
// Fails (exit 1, with the reasons) when the page logs a console error or warning, throws, gets
// an HTTP error for anything it loads, misses a configured task, never goes live, or when the
// total request count (#requests-total, its data-value) does not rise over a few seconds of
// traffic, or when the provider table does not show claude passing summarize's gate, or (given
// the admin token) when the top-spenders panel, opened with the token typed in, does not show
// every key and team /admin/spenders lists, each with its spend and "no budget". Saves a
// full-page screenshot either way, once the page has loaded.
// Chromium: $CHROMIUM, else /usr/bin/chromium (Debian package `chromium`); nothing is downloaded.
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';

const [base, screenshot, adminToken] = process.argv.slice(2);
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

  // The batch panel: every job /dashboard/data lists, with its plan's route, and every pool's
  // occupancy by priority.
  const data = await (await fetch(`${base}/dashboard/data`)).json();
  const jobRows = await page.$$eval('#batch-jobs tr[data-batch]', (els) =>
    els.map((e) => ({ id: e.dataset.batch, route: e.querySelector('[data-field="route"]').textContent })));
  log(`batch rows: ${jobRows.map((j) => `${j.id} ${j.route}`).join(', ')}`);
  for (const j of data.batch.jobs) {
    const row = jobRows.find((r) => r.id === j.id);
    const route = j.plan && j.plan.route ? j.plan.route.replace('_', ' ') : null;
    if (!row) problems.push(`no batch row for job ${j.id}`);
    else if (route && row.route !== route) problems.push(`job ${j.id} shows plan ${row.route}, not ${route}`);
  }
  if (data.batch.jobs.length === 0) problems.push('no batch job to show (the test submits one)');
  for (const pool of Object.keys(data.batch.occupancy)) {
    const cells = await page.$$eval(`#occupancy tr[data-pool="${pool}"] td[data-field]`, (els) => els.map((e) => e.textContent));
    log(`occupancy of ${pool}: ${cells.join(' / ')}`);
    if (cells.length !== 3 || !cells.every((c) => c.endsWith('%'))) problems.push(`occupancy row of ${pool}: ${JSON.stringify(cells)}`);
  }

  // Top spenders: closed until the admin token is typed in, then every key and team of both
  // periods, as /admin/spenders lists them.
  if (adminToken) {
    const shown = await page.$$eval('#spenders-periods [data-period]', (els) => els.length);
    if (shown !== 0) problems.push(`the spenders panel showed ${shown} periods before the admin token was given`);
    await page.fill('#admin-token', adminToken);
    await page.click('#spenders-show');
    await page.waitForSelector('#spenders-periods [data-period="month"] tr[data-spender-team]', { timeout: 15000 });
    const token = await page.$eval('#admin-token', (e) => e.value);
    if (token !== '') problems.push('the admin token stayed in its input');
    const spend = await (await fetch(`${base}/admin/spenders`, { headers: { Authorization: `Bearer ${adminToken}` } })).json();
    for (const p of spend.periods) {
      const rows = await page.$$eval(`#spenders-periods [data-period="${p.period}"] tr[data-spender-key], #spenders-periods [data-period="${p.period}"] tr[data-spender-team]`,
        (els) => els.map((e) => ({
          key: e.dataset.spenderKey, team: e.dataset.spenderTeam,
          spend: e.querySelector('[data-field="spend"]').textContent,
          budget: e.querySelector('[data-field="budget"]').textContent,
        })));
      log(`spenders ${p.period}: ${rows.map((r) => `${r.key ?? r.team} ${r.spend} (${r.budget})`).join(', ')}`);
      for (const k of p.keys) {
        if (!rows.some((r) => r.key === k.key)) problems.push(`${p.period}: no row for key ${k.key}`);
      }
      for (const t of p.teams) {
        const row = rows.find((r) => r.team === t.team);
        if (!row) problems.push(`${p.period}: no row for team ${t.team}`);
        else if (!row.spend.startsWith('$') || row.budget !== 'no budget') problems.push(`${p.period}: team ${t.team} row reads ${JSON.stringify(row)}`);
      }
      const teamRows = rows.filter((r) => r.team !== undefined).length;
      if (p.teams.length < 2 || teamRows !== p.teams.length) problems.push(`${p.period}: ${teamRows} team rows for ${p.teams.length} teams`);
    }
  }
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
log('dashboard check passed: no console errors or warnings, every task shown, requests rising, batch jobs and occupancy shown, spenders shown');
