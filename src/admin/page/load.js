// The admin page's latency-vs-load chart: one curve of /slo's `capacity`
// (a route, model and class over a live window), drawn by the page script
// with its own helpers. Loaded before page.js, which calls
// `tokenmeterDrawLoad(fig, curve, window, h)`. Every text from the server
// goes through textContent or an attribute.
'use strict';

// eslint-disable-next-line no-unused-vars
function tokenmeterDrawLoad(fig, curve, windowName, h) {
  const { node, shape, ticks, seconds, C, M } = h;
  const plot = fig.querySelector('.plot');
  const legend = fig.querySelector('.legend');
  const note = fig.querySelector('.note');
  const width = Math.max(plot.clientWidth, 240);
  const height = plot.clientHeight || 200;
  // Room on the right for the goodput axis.
  const right = 44;
  const w = width - M.left - right;
  const ht = height - M.top - M.bottom;

  const win = curve && curve.windows.find((x) => x.window === windowName);
  const buckets = win ? win.buckets : [];
  // The objective drawn: TTFT's target where the class has one, else the
  // first objective with a latency.
  const targetsOf = (b) => b.targets.filter((t) => t.objective !== 'goodput');
  const names = buckets.length ? targetsOf(buckets[0]).map((t) => t.objective) : [];
  const objective = names.includes('ttft') ? 'ttft' : names[0];
  const latency = (b) => {
    const t = b.targets.find((x) => x.objective === objective);
    return t ? t.percentile_seconds : null;
  };
  const goodput = (b) => (b.judged > 0 ? b.good / b.judged : null);
  const quantile = (() => {
    const t = buckets.length && buckets[0].targets.find((x) => x.objective === objective);
    return t ? `p${Math.round(t.target * 100)}` : '';
  })();

  // x: one column per bucket seen, plus the buckets of the knee and of
  // the load now when they lie beyond.
  const knee = win ? win.knee : null;
  const loadNow = curve ? curve.load_now : null;
  const columns = buckets.map((b) => ({ min: b.load_min, max: b.load_max, label: b.load_le, bucket: b }));
  const columnOf = (load) => columns.findIndex((c) => load >= c.min && (c.max == null || load <= c.max));
  const n = Math.max(columns.length, 1);
  const x = (i) => M.left + ((i + 0.5) / n) * w;
  // A load inside a column sits along its span (5 of 5–6 left of centre).
  const xLoad = (load) => {
    const i = columnOf(load);
    if (i < 0) return null;
    const c = columns[i];
    const span = c.max == null ? 0 : c.max - c.min;
    const at = span > 0 ? (load - c.min) / span - 0.5 : 0;
    return x(i) + (at * w) / n / 2;
  };

  let yMaxSeen = 0;
  for (const b of buckets) yMaxSeen = Math.max(yMaxSeen, latency(b) || 0);
  const threshold = objective ? h.thresholdFor(objective) : null;
  if (threshold) yMaxSeen = Math.max(yMaxSeen, threshold.value);
  const ys = ticks(0, yMaxSeen > 0 ? yMaxSeen * 1.08 : 1, 4);
  const yMax = ys[ys.length - 1];
  const y = (v) => M.top + ht - (v / yMax) * ht;
  const yRatio = (v) => M.top + ht - v * ht;

  const root = shape('svg', {
    viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-labelledby': `title-${fig.dataset.chart}`,
  });
  for (const v of ys) {
    root.append(shape('line', { class: 'grid', x1: M.left, x2: M.left + w, y1: y(v), y2: y(v) }));
    root.append(shape('text', { x: M.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, seconds(v)));
  }
  for (const v of [0, 0.5, 1]) {
    root.append(shape('text', { x: M.left + w + 6, y: yRatio(v) + 4, 'text-anchor': 'start' }, `${v * 100} %`));
  }
  columns.forEach((c, i) => {
    const label = c.max == null ? `>${c.min - 1}` : c.min === c.max ? String(c.min) : `${c.min}–${c.max}`;
    root.append(shape('text', { x: x(i), y: height - 6, 'text-anchor': 'middle' }, label));
  });

  // A line through the buckets' values; a bucket with too few requests is
  // drawn hollow, as a value not yet believed.
  const line = (name, color, dash, value, fy) => {
    let d = '';
    let drawn = 0;
    let open = false;
    const dots = [];
    columns.forEach((c, i) => {
      const v = value(c.bucket);
      if (v == null) {
        open = false;
        return;
      }
      d += `${open ? 'L' : 'M'}${x(i).toFixed(1)},${fy(v).toFixed(1)}`;
      open = true;
      drawn += 1;
      const few = c.bucket.state === 'too_few';
      dots.push(shape('circle', {
        cx: x(i).toFixed(1), cy: fy(v).toFixed(1), r: 3.5, stroke: color, 'stroke-width': 1.5,
        fill: few ? 'none' : color, 'data-state': c.bucket.state,
      }));
    });
    const values = columns.map((c) => value(c.bucket)).filter((v) => v != null);
    root.append(shape('path', {
      d, fill: 'none', stroke: color, 'stroke-width': 2, 'stroke-dasharray': dash,
      'data-series': name, 'data-points': drawn, 'data-max': values.length ? Math.max(...values) : 0,
    }));
    for (const dot of dots) root.append(dot);
  };
  const latencyName = objective ? `${objective.toUpperCase()} ${quantile}` : 'latency';
  line(latencyName, C.blue, '', latency, y);
  line('goodput', C.green, '7 3', goodput, yRatio);

  if (threshold) {
    root.append(shape('line', {
      x1: M.left, x2: M.left + w, y1: y(threshold.value), y2: y(threshold.value), stroke: C.vermillion,
      'stroke-width': 1.5, 'stroke-dasharray': '10 3 2 3', 'data-threshold': threshold.value,
    }));
    root.append(shape('text', {
      class: 'threshold-label', x: M.left + 4, y: y(threshold.value) - 4, 'text-anchor': 'start',
    }, threshold.label));
  }
  // The knee and the load now, as labelled verticals.
  const mark = (load, label, color, dash, key) => {
    const at = load == null ? null : xLoad(load);
    if (at == null) return;
    root.append(shape('line', {
      x1: at, x2: at, y1: M.top, y2: M.top + ht, stroke: color, 'stroke-width': 1.5,
      'stroke-dasharray': dash, [`data-${key}`]: load,
    }));
    root.append(shape('text', { x: at + 3, y: M.top + 10, 'text-anchor': 'start', class: 'mark-label' }, label));
  };
  if (knee && knee.concurrency != null && knee.concurrency > 0) {
    mark(knee.concurrency, `knee ${knee.bound === 'lower' ? '≥ ' : ''}${knee.concurrency}`, C.vermillion, '', 'knee');
  }
  if (loadNow != null && loadNow > 0) mark(loadNow, `now ${loadNow}`, C.grey, '3 3', 'now');

  plot.replaceChildren(root);
  if (!buckets.length) plot.append(node('div', { class: 'empty' }, 'no judged requests in this window'));

  const swatch = (color, dash, dot) => {
    const s = shape('svg', { viewBox: '0 0 22 10', 'aria-hidden': 'true' });
    s.append(dot
      ? shape('circle', { cx: 11, cy: 5, r: 3.5, stroke: color, 'stroke-width': 1.5, fill: 'none' })
      : shape('line', { x1: 1, x2: 21, y1: 5, y2: 5, stroke: color, 'stroke-width': 2.5, 'stroke-dasharray': dash }));
    return s;
  };
  const item = (s, text) => {
    const e = node('span', { class: 'item' });
    e.append(s, document.createTextNode(text));
    return e;
  };
  legend.replaceChildren(
    item(swatch(C.blue, ''), `${latencyName} (left)`),
    item(swatch(C.green, '7 3'), 'goodput (right)'),
    item(swatch(C.grey, '', true), `fewer than ${curve ? curve.min_judged : '–'} requests`),
  );
  note.textContent = kneeText(knee, curve);
  fig.dataset.knee = knee && knee.concurrency != null ? String(knee.concurrency) : '';
  fig.dataset.kneeState = knee ? knee.state : 'unknown';
  fig.dataset.now = loadNow == null ? '' : String(loadNow);
}

// What the knee says, in words.
function kneeText(knee, curve) {
  if (!curve) return 'No judged request of this class yet: the curve is drawn from requests judged against it, by the concurrency each met on arrival.';
  const headroom = knee && knee.headroom != null ? `; headroom ${knee.headroom > 0 ? '+' : ''}${knee.headroom}` : '';
  switch (knee && knee.state) {
    case 'measured':
      return `Knee: ${knee.concurrency} concurrent requests, the most at which every objective still holds (first break at ${knee.first_break})${headroom}. Model ${curve.model}.`;
    case 'lower_bound':
      return `Knee: at least ${knee.concurrency}: no load seen so far broke an objective${headroom}. Model ${curve.model}.`;
    case 'breaks_at_one':
      return `Even one request at a time misses an objective: more replicas will not help; the engine or the objectives need a look. Model ${curve.model}.`;
    default:
      return `Knee unknown: a load counts once it has ${curve.min_judged} judged requests. Model ${curve.model}.`;
  }
}
