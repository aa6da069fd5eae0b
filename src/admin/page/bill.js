// The admin page's "Who used the GPUs" charts: one per GPU set of /slo's
// `chargeback` (the GPUs its routes share), over the chosen live window. A bar
// per tenant of what its requests that ended in the window were charged,
// good and wasted, then what the requests in flight have accrued, what was
// left to other replicas and the idle time. The amount is the cost where
// the set is priced, else GPU-seconds. Loaded before page.js, which calls
// `tokenmeterDrawBill(section, chargeback, window, h)`. Every text from the
// server goes through textContent or an attribute.
'use strict';

const BILL_WINDOWS = { '1m': '1 min', '5m': '5 min', '1h': '1 h' };
// One bar's row, and the room left for the rows that are not tenants.
const BILL_ROW = 22;
const BILL_GAP = 8;

// eslint-disable-next-line no-unused-vars
function tokenmeterDrawBill(section, chargeback, windowName, h) {
  const routes = chargeback ? chargeback.routes : [];
  for (const b of section.querySelectorAll('[data-bill-window]')) {
    b.setAttribute('aria-pressed', String(b.dataset.billWindow === windowName));
  }
  section.querySelector('.range').hidden = !routes.length;
  section.querySelector('#bill-none').hidden = routes.length > 0;
  const box = section.querySelector('#bill-charts');
  // A figure per GPU set, kept across refreshes while the set is there.
  const figures = new Map([...box.children].map((f) => [f.dataset.gpuSet, f]));
  const wanted = [];
  for (const route of routes) {
    let fig = figures.get(route.gpu_set);
    if (!fig) {
      fig = h.node('figure', { class: 'chart', 'data-chart': `bill:${route.gpu_set}`, 'data-gpu-set': route.gpu_set });
      const cap = h.node('figcaption');
      cap.append(h.node('h3', { id: `title-bill:${route.gpu_set}` }), h.node('p', { class: 'note' }));
      fig.append(cap, h.node('div', { class: 'plot' }), h.node('div', { class: 'legend' }));
    }
    wanted.push(fig);
  }
  box.replaceChildren(...wanted);
  routes.forEach((route, i) => drawRouteBill(wanted[i], route, windowName, h));
}

// Money with two significant digits below 1 (a GPU-minute is a few
// hundredths) down to a millionth, two decimals up to 100, none beyond.
function billMoney(v) {
  const a = Math.abs(v);
  if (a === 0) return '0';
  const digits = a >= 100 ? 0 : a >= 1 ? 2 : Math.min(1 - Math.floor(Math.log10(a)), 6);
  return Number(v.toFixed(digits)).toString();
}

function billJoules(v) {
  if (v >= 1e6) return `${Number((v / 1e6).toPrecision(3))} MJ`;
  if (v >= 1e3) return `${Number((v / 1e3).toPrecision(3))} kJ`;
  return `${Number(v.toPrecision(3))} J`;
}

function drawRouteBill(fig, route, windowName, h) {
  const { node, shape, ticks, count, percent, C, M } = h;
  const win = route.windows.find((w) => w.window === windowName) || null;
  const priced = route.currency != null && !!win && win.total.cost != null;
  const key = priced ? 'cost' : 'gpu_seconds';
  const raw = (a) => (a && a[key] != null ? Math.max(a[key], 0) : 0);
  // Below a billionth of the set's total is the rounding of a sum, not
  // an amount (a gauge of requests in flight that just ended).
  const floor = win ? raw(win.total) * 1e-9 : 0;
  const of = (a) => (raw(a) > floor ? raw(a) : 0);
  const tick = priced ? billMoney : count;
  const amount = priced ? (v) => `${billMoney(v)} ${route.currency}` : (v) => `${count(v)} GPU-s`;
  // All three quantities of an amount, for its tooltip and the total.
  const full = (a) => [
    a.cost != null && route.currency != null ? `${billMoney(a.cost)} ${route.currency}` : null,
    `${count(a.gpu_seconds)} GPU-s`,
    a.joules != null ? billJoules(a.joules) : null,
  ].filter((x) => x != null).join(', ');

  // A set shared by routes, or named apart from its one route, says which.
  const shared = route.routes.length === 1 && route.routes[0] === route.gpu_set ? '' : ` (${route.routes.join(', ')})`;
  fig.querySelector('h3').textContent = `${route.gpu_set}${shared}: ${priced ? `cost in ${route.currency}` : 'GPU-seconds'}, last ${BILL_WINDOWS[windowName] || windowName}`;
  const tenants = win ? win.tenants.map((t) => ({
    label: t.tenant,
    parts: [
      { part: 'good', name: 'good', color: C.green, a: t.good },
      { part: 'waste', name: 'waste', color: C.vermillion, a: t.waste },
    ],
  })) : [];
  const sumOf = (row) => row.parts.reduce((s, p) => s + of(p.a), 0);
  tenants.sort((a, b) => sumOf(b) - sumOf(a) || (a.label < b.label ? -1 : 1));
  const others = win ? [
    ['in_flight', 'in flight', C.sky, win.in_flight],
    ['other_replicas', 'other replicas', C.purple, win.other_replicas],
    ['idle', 'idle', C.grey, win.idle],
  ].map(([part, name, color, a]) => ({ label: name, other: true, parts: [{ part, name, color, a }] })) : [];
  const rows = tenants.concat(others);
  const total = win ? of(win.total) : 0;

  // Labels on the left (long tenant names cut, whole in the tooltip),
  // each bar's amount and share of the set's total on the right.
  const cut = (s) => (s.length > 18 ? `${s.slice(0, 17)}…` : s);
  const left = Math.min(Math.max(...rows.map((r) => cut(r.label).length), 6) * 6.6 + 10, 140);
  const right = 130;
  const plot = fig.querySelector('.plot');
  const width = Math.max(plot.clientWidth, 260);
  const counted = total > 0;
  // With nothing counted, no rows: a short plot that says so.
  const height = counted
    ? M.top + rows.length * BILL_ROW + (tenants.length ? BILL_GAP : 0) + M.bottom
    : 80;
  plot.style.height = `${height}px`;
  const w = width - left - right;
  const max = Math.max(...rows.map(sumOf));
  const xs = ticks(0, max > 0 ? max : 1, 4);
  const xMax = xs[xs.length - 1];
  const x = (v) => left + (v / xMax) * w;
  const bottom = height - M.bottom;

  const root = shape('svg', {
    viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-labelledby': `title-bill:${route.gpu_set}`,
  });
  for (const v of counted ? xs : []) {
    root.append(shape('line', { class: 'grid', x1: x(v), x2: x(v), y1: M.top, y2: bottom }));
    root.append(shape('text', { x: x(v), y: height - 6, 'text-anchor': 'middle' }, tick(v)));
  }
  let y = M.top;
  (counted ? rows : []).forEach((row, i) => {
    if (row.other && i > 0 && !rows[i - 1].other) y += BILL_GAP;
    const value = sumOf(row);
    const g = shape('g', {
      'data-series': row.other ? row.label : `tenant ${row.label}`,
      'data-points': row.parts.filter((p) => of(p.a) > 0).length,
      'data-max': value,
    });
    const label = shape('text', { x: left - 6, y: y + BILL_ROW / 2 + 4, 'text-anchor': 'end', class: row.other ? '' : 'mark-label' }, cut(row.label));
    if (cut(row.label) !== row.label) label.append(shape('title', {}, row.label));
    g.append(label);
    let at = 0;
    for (const p of row.parts) {
      const v = of(p.a);
      const seg = shape('rect', {
        x: x(at).toFixed(1), y: y + 4, width: Math.max(x(at + v) - x(at), 0).toFixed(1), height: BILL_ROW - 8,
        fill: p.color, 'data-part': p.part, 'data-value': v,
      });
      seg.append(shape('title', {}, `${row.label}${row.other ? '' : `, ${p.name}`}: ${full(p.a)}`));
      g.append(seg);
      at += v;
    }
    const share = total > 0 ? ` · ${percent(value / total)}` : '';
    g.append(shape('text', { x: x(value) + 6, y: y + BILL_ROW / 2 + 4, 'text-anchor': 'start' }, `${amount(value)}${share}`));
    root.append(g);
    y += BILL_ROW;
  });
  plot.replaceChildren(root);
  if (!counted) plot.append(node('div', { class: 'empty' }, 'no GPU time counted in this window yet'));

  const legend = fig.querySelector('.legend');
  const item = (color, text) => {
    const e = node('span', { class: 'item' });
    const s = shape('svg', { viewBox: '0 0 22 10', 'aria-hidden': 'true' });
    s.append(shape('rect', { x: 2, y: 1, width: 18, height: 8, fill: color }));
    e.append(s, document.createTextNode(text));
    return e;
  };
  legend.replaceChildren(
    item(C.green, 'good'), item(C.vermillion, 'waste'), item(C.sky, 'in flight'),
    item(C.purple, 'other replicas'), item(C.grey, 'idle'),
    node('span', { class: 'item value' }, win ? `total ${full(win.total)}` : ''),
  );

  // The two shares worth a sentence: capacity nobody used, and the part
  // of the tenants' charge spent on requests that were not good.
  const charged = tenants.reduce((s, r) => s + sumOf(r), 0);
  const waste = tenants.reduce((s, r) => s + of(r.parts[1].a), 0);
  // A window covers less while the process is younger than it, and a
  // little more than its name as a rule (/slo's `seconds`: its start is a
  // point of the counts, sampled every 10 s, kept one a minute past 5
  // minutes).
  const covers = parseSpan(windowName);
  let span = `the last ${BILL_WINDOWS[windowName] || windowName}`;
  if (win && win.seconds < covers - 1) span = `the ${h.duration(win.seconds)} counted so far`;
  if (win && win.seconds > covers * 1.25) span = `the last ${h.duration(win.seconds)}`;
  let note = 'This window is not reported.';
  if (win && !counted) note = 'Each tenant\'s share of the GPUs shows here once its requests end.';
  if (counted) {
    note = `Over ${span}: idle ${percent(of(win.idle) / total)} of the GPUs' time; `
      + `${charged > 0 ? percent(waste / charged) : '–'} of the tenants' charge wasted (requests that missed their objectives, failed or were abandoned).`;
  }
  fig.querySelector('.note').textContent = note;
  fig.dataset.idleShare = counted ? String(of(win.idle) / total) : '';
  fig.dataset.wasteShare = charged > 0 ? String(waste / charged) : '';
}

// A window's width in seconds, from its name.
function parseSpan(name) {
  const n = Number(name.slice(0, -1));
  return name.endsWith('h') ? n * 3600 : name.endsWith('m') ? n * 60 : n;
}
