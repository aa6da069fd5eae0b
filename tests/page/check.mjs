// Drives the admin page in headless Chromium for tests/it/page.rs.
//
//   node check.mjs <page url> [screenshot.png]
//
// Speaks JSON lines on stdout; reads commands on stdin:
// 1. loads the page, waits for two refreshes and prints
//    {"event":"loaded", ...what the rendered DOM shows};
// 2. on the line "watch", notes the refresh count and prints
//    {"event":"states", ...} after every refresh until the line "stop"
//    (or 60 s), then narrows the window and prints {"event":"narrow", ...};
// 3. with a screenshot path, saves a full-page screenshot last.
// Console errors, page errors and refused requests (a content security
// policy violation among them) are reported in every message.
import { chromium } from 'playwright-core';
import readline from 'node:readline';

const [url, screenshot] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';

const say = (msg) => process.stdout.write(`${JSON.stringify(msg)}\n`);
const problems = [];

const lines = readline.createInterface({ input: process.stdin });
const queue = [];
let waiting = null;
lines.on('line', (l) => {
  if (waiting) {
    const w = waiting;
    waiting = null;
    w(l.trim());
  } else {
    queue.push(l.trim());
  }
});
const nextLine = () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => { waiting = r; }));

const browser = await chromium.launch({
  executablePath,
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1800 } });
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));

  await page.goto(url);
  const refreshes = () => page.evaluate(() => Number(document.body.dataset.refreshes || 0));
  await page.waitForFunction(() => Number(document.body.dataset.refreshes || 0) >= 2, null, { timeout: 30000 });

  const facts = await page.evaluate(() => {
    const charts = {};
    for (const fig of document.querySelectorAll('figure.chart')) {
      const series = {};
      for (const s of fig.querySelectorAll('[data-series]')) {
        series[s.dataset.series] = {
          points: Number(s.dataset.points),
          max: s.dataset.max == null ? null : Number(s.dataset.max),
        };
      }
      const svg = fig.querySelector('.plot svg');
      charts[fig.dataset.chart] = {
        hidden: fig.hidden,
        knee: fig.dataset.knee ?? null,
        knee_state: fig.dataset.kneeState ?? null,
        now: fig.dataset.now ?? null,
        title: fig.querySelector('h3').textContent,
        note: fig.querySelector('.note')?.textContent ?? null,
        series,
        thresholds: [...fig.querySelectorAll('[data-threshold]')].map((t) => Number(t.dataset.threshold)),
        ticks: [...fig.querySelectorAll('.plot svg text')].map((t) => t.textContent),
        legend: fig.querySelector('.legend').textContent,
        // The bars of a chargeback chart: each segment's row, part, amount
        // and drawn width.
        parts: [...fig.querySelectorAll('[data-part]')].map((p) => ({
          row: p.closest('[data-series]').dataset.series,
          part: p.dataset.part,
          value: Number(p.dataset.value),
          width: Number(p.getAttribute('width')),
        })),
        idle_share: fig.dataset.idleShare ?? null,
        waste_share: fig.dataset.wasteShare ?? null,
        labelled: !!svg && svg.getAttribute('role') === 'img'
          && !!document.getElementById(svg.getAttribute('aria-labelledby') || ''),
      };
    }
    const states = {};
    for (const row of document.querySelectorAll('#objective-rows tr[data-objective]')) {
      states[row.dataset.objective] = { state: row.dataset.state, text: row.textContent };
    }
    const stats = {};
    for (const s of document.querySelectorAll('[data-stat]')) {
      stats[s.dataset.stat] = s.querySelector('.value').textContent;
    }
    // The Sessions section: its figures as drawn, each with its raw value.
    const section = document.getElementById('sessions');
    const sessionStats = {};
    for (const s of section.querySelectorAll('[data-session-stat]')) {
      sessionStats[s.dataset.sessionStat] = {
        text: s.querySelector('.value').textContent,
        value: s.dataset.value === '' ? null : Number(s.dataset.value),
      };
    }
    const num = (v) => (v == null || v === '' ? null : Number(v));
    const sessions = {
      hidden: document.getElementById('sessions-body').hidden,
      route: section.dataset.route ?? null,
      window: section.dataset.window ?? null,
      text: section.textContent,
      split: document.getElementById('sessions-split').textContent,
      stats: sessionStats,
      turns: [...section.querySelectorAll('tr[data-turn]')].map((r) => ({
        turn: r.dataset.turn,
        requests: num(r.dataset.requests),
        p50: num(r.dataset.p50),
        p90: num(r.dataset.p90),
        text: r.textContent,
      })),
      costliest: [...section.querySelectorAll('tr[data-session]')].map((r) => ({
        key: r.dataset.session,
        tenant: r.dataset.tenant,
        turns: num(r.dataset.turns),
        cost: num(r.dataset.cost),
        gpu_seconds: num(r.dataset.gpuSeconds),
        text: r.textContent,
      })),
    };
    return {
      sessions,
      series: document.getElementById('series').value,
      no_gpus_note: !document.getElementById('bill-none').hidden,
      options: [...document.getElementById('series').options].map((o) => o.textContent),
      charts,
      states,
      stats,
    };
  });
  say({ event: 'loaded', ...facts, refreshes: await refreshes(), problems });

  if ((await nextLine()) === 'watch') {
    const states = () => page.evaluate(() => {
      const out = {};
      for (const row of document.querySelectorAll('#objective-rows tr[data-objective]')) {
        out[row.dataset.objective] = row.dataset.state;
      }
      return out;
    });
    const start = await refreshes();
    say({ event: 'states', refreshes: 0, states: await states() });
    let stopped = false;
    nextLine().then(() => { stopped = true; });
    let seen = start;
    const deadline = Date.now() + 60000;
    while (!stopped && Date.now() < deadline) {
      await page.waitForFunction((n) => Number(document.body.dataset.refreshes || 0) > n, seen, { timeout: 10000 });
      seen = await refreshes();
      say({ event: 'states', refreshes: seen - start, states: await states(), problems });
    }
    await page.setViewportSize({ width: 400, height: 900 });
    await page.waitForTimeout(300);
    const narrow = await page.evaluate(() => ({
      scroll_width: document.documentElement.scrollWidth,
      width: window.innerWidth,
      chart_widths: [...document.querySelectorAll('figure.chart')].map((f) => f.getBoundingClientRect().width),
    }));
    say({ event: 'narrow', ...narrow, problems });
  }
  if (screenshot) {
    await page.setViewportSize({ width: 1400, height: 1000 });
    await page.waitForTimeout(300);
    await page.screenshot({ path: screenshot, fullPage: true });
  }
} finally {
  await browser.close();
  lines.close();
}
