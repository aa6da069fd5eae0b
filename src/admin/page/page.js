// The admin page: reads /slo and /slo/history every REFRESH_MS and draws
// them as SVG. Every text that comes from the server goes through
// textContent or an attribute, never through HTML parsing.
'use strict';

(() => {
  const REFRESH_MS = 2000;
  const SVG = 'http://www.w3.org/2000/svg';
  // Okabe–Ito: told apart with the common colour-vision deficiencies; the
  // lines differ by dash as well, and every legend names its line.
  const C = {
    blue: '#0072B2', orange: '#E69F00', green: '#009E73', vermillion: '#D55E00',
    purple: '#CC79A7', sky: '#56B4E9', yellow: '#F0E442', grey: '#7f7f7f',
  };
  const DASH = { p50: '', p95: '7 3', p99: '2 3' };
  const PHASE_NOTES = {
    engine: 'Completed streams, by the server\'s own timings: its queue, prefill and decode, and the time outside the engine before the first token (network, HTTP server, tokenization, the proxy).',
    headers: 'The server reports no phases: completed streams split at the response head (queueing, where the server sends its head as work starts), the first token (prefill) and the end (decode).',
  };
  const OUTCOMES = [
    ['ok', 'ok', C.green], ['upstream_error', 'upstream error', C.vermillion],
    ['timeout', 'timeout', C.orange], ['client_abort', 'client abort', C.sky],
    ['client_timeout', 'client timeout', C.purple], ['proxy_error', 'proxy error', C.grey],
  ];
  const OBJECTIVE_NAMES = { ttft: 'TTFT', tpot: 'TPOT', e2el: 'E2EL', goodput: 'Goodput' };
  const STATES = {
    ok: '● OK', warning: '▲ Warning', breach: '✖ Breach', no_data: '○ No data',
  };

  const view = {
    key: null, // route + '\u0000' + slo
    range: 900,
    points: [],
    scatter: [],
    series: null, // this key's entry of /slo
    history: null, // this key's entry of /slo/history (objectives, targets)
    capacity: [], // /slo's latency-load curves
    engine: [], // this route's engine and GPU figures, one sample a refresh
    chargeback: null, // /slo's who used the GPUs, every route's
    bill: '5m', // the window of the chargeback charts
    sessions: null, // /slo's sessions and turns, every route's
    sessionsWindow: '5m', // the window of the Sessions section
  };

  // ---------- formatting ----------

  function seconds(v) {
    if (v == null || !isFinite(v)) return '–';
    if (v === 0) return '0';
    if (v < 1e-3) return `${(v * 1e6).toFixed(0)} µs`;
    if (v < 1) return `${trim(v * 1e3, v < 0.01 ? 2 : v < 0.1 ? 1 : 0)} ms`;
    return `${trim(v, v < 10 ? 2 : 1)} s`;
  }

  function trim(v, digits) {
    return Number(v.toFixed(digits)).toString();
  }

  function count(v) {
    if (v == null || !isFinite(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e6) return `${trim(v / 1e6, 1)}M`;
    if (a >= 1e4) return `${trim(v / 1e3, 0)}k`;
    if (a >= 1e3) return `${trim(v / 1e3, 1)}k`;
    return trim(v, a < 10 ? 2 : a < 100 ? 1 : 0);
  }

  function percent(v) {
    if (v == null || !isFinite(v)) return '–';
    return `${trim(v * 100, v > 0.999 && v < 1 ? 2 : 1)} %`;
  }

  function duration(s) {
    if (s >= 86400) return `${trim(s / 86400, 1)} d`;
    if (s >= 3600) return `${trim(s / 3600, 1)} h`;
    if (s >= 60) return `${trim(s / 60, 0)} min`;
    return `${trim(s, 0)} s`;
  }

  const UNITS = {
    seconds: { tick: seconds, value: seconds },
    ratio: { tick: (v) => `${trim(v * 100, 0)} %`, value: percent },
    rate: { tick: count, value: (v) => (v == null ? '–' : `${count(v)}/s`) },
    count: { tick: count, value: count },
  };

  function clock(t) {
    const d = new Date(t * 1000);
    return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  }

  // ---------- DOM ----------

  function node(tag, attrs = {}, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text != null) e.textContent = text;
    return e;
  }

  function shape(tag, attrs = {}, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v !== '' && v != null) e.setAttribute(k, v);
    }
    if (text != null) e.textContent = text;
    return e;
  }

  // ---------- scales ----------

  // Round steps (1, 2, 5 × 10^k) from 0 (or min) to at least max.
  function ticks(min, max, want) {
    if (!(max > min)) max = min + 1;
    const raw = (max - min) / want;
    const mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
    const lo = Math.floor(min / step) * step;
    const hi = Math.ceil(max / step) * step;
    const out = [];
    for (let v = lo; v <= hi + step / 2; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }

  function timeTicks(t0, t1) {
    const span = t1 - t0;
    const step = [60, 120, 300, 600, 900, 1800].find((s) => span / s <= 6) || 3600;
    const out = [];
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
    return out;
  }

  // ---------- charts ----------

  const M = { left: 58, right: 14, top: 10, bottom: 24 };

  // A chart: a figure with a title, an optional note, a plot and a legend.
  // spec: { id, title, note, unit, kind: 'line' | 'stack' | 'scatter' }
  function figure(spec) {
    const fig = node('figure', { class: 'chart', 'data-chart': spec.id });
    const cap = node('figcaption');
    cap.append(node('h3', { id: `title-${spec.id}` }, spec.title));
    if (spec.note) cap.append(node('p', { class: 'note' }, spec.note));
    fig.append(cap, node('div', { class: 'plot' }), node('div', { class: 'legend' }));
    return fig;
  }

  // Each threshold as a dash-dot line across the plot, labelled at its
  // left end (where the oldest, usually sparser, points are).
  function drawThresholds(root, thresholds, y, w) {
    for (const th of thresholds) {
      root.append(shape('line', {
        x1: M.left, x2: M.left + w, y1: y(th.value), y2: y(th.value), stroke: C.vermillion,
        'stroke-width': 1.5, 'stroke-dasharray': '10 3 2 3', 'data-threshold': th.value,
      }));
      root.append(shape('text', {
        class: 'threshold-label', x: M.left + 4, y: y(th.value) - 4, 'text-anchor': 'start',
      }, th.label));
    }
  }

  function peak(values) {
    return values.reduce((m, v) => (v != null && v > m ? v : m), 0);
  }

  // Draws `lines` ({ name, color, dash, values }) over `xs` in the
  // figure; `stack` stacks them as areas. `thresholds`: [{ value, label }].
  function drawSeries(fig, spec, xs, lines, thresholds, t0, t1) {
    const plot = fig.querySelector('.plot');
    const width = Math.max(plot.clientWidth, 240);
    const height = plot.clientHeight || 200;
    const unit = UNITS[spec.unit];
    const w = width - M.left - M.right;
    const h = height - M.top - M.bottom;

    let values = lines.map((l) => l.values);
    if (spec.kind === 'stack') {
      const sums = xs.map(() => 0);
      values = lines.map((l) => l.values.map((v, i) => (sums[i] += v || 0)));
    }
    let max = 0;
    for (const vs of values) for (const v of vs) if (v != null && v > max) max = v;
    for (const th of thresholds) max = Math.max(max, th.value);
    if (spec.max != null) max = spec.max;
    const ys = ticks(0, max > 0 ? max * (spec.max != null ? 1 : 1.08) : 1, 4);
    const yMax = ys[ys.length - 1];
    const x = (t) => M.left + ((t - t0) / (t1 - t0)) * w;
    const y = (v) => M.top + h - (v / yMax) * h;

    const root = shape('svg', {
      viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-labelledby': `title-${spec.id}`,
    });
    for (const v of ys) {
      root.append(shape('line', { class: 'grid', x1: M.left, x2: M.left + w, y1: y(v), y2: y(v) }));
      root.append(shape('text', { x: M.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, unit.tick(v)));
    }
    for (const t of timeTicks(t0, t1)) {
      root.append(shape('text', { x: x(t), y: height - 6, 'text-anchor': 'middle' }, clock(t)));
    }

    lines.forEach((line, i) => {
      const vs = values[i];
      let d = '';
      let drawn = 0;
      let open = false;
      if (spec.kind === 'stack') {
        // Bars, one per point, stacked: a count per interval, and a lone
        // point shows as well as many.
        const below = i > 0 ? values[i - 1] : xs.map(() => 0);
        const bar = Math.max(((spec.step || 10) / (t1 - t0)) * w - 1, 1.5);
        const g = shape('g', {
          fill: line.color, 'data-series': line.name,
          'data-points': line.values.filter((v) => v != null && v > 0).length,
          'data-max': peak(line.values),
        });
        xs.forEach((t, j) => {
          const top = y(vs[j]);
          const bottom = y(below[j]);
          if (bottom - top > 0.05) {
            g.append(shape('rect', {
              x: (x(t) - bar / 2).toFixed(1), y: top.toFixed(1), width: bar.toFixed(1), height: (bottom - top).toFixed(1),
            }));
          }
        });
        root.append(g);
        return;
      }
      vs.forEach((v, j) => {
        if (v == null) {
          open = false;
          return;
        }
        d += `${open ? 'L' : 'M'}${x(xs[j]).toFixed(1)},${y(v).toFixed(1)}`;
        open = true;
        drawn += 1;
      });
      const path = shape('path', {
        d, fill: 'none', stroke: line.color, 'stroke-width': 2, 'stroke-dasharray': line.dash,
        'stroke-linejoin': 'round', 'data-series': line.name, 'data-points': drawn,
        'data-max': peak(line.values),
      });
      root.append(path);
      // A point with no neighbour is no line: mark it.
      vs.forEach((v, j) => {
        if (v != null && vs[j - 1] == null && vs[j + 1] == null) {
          root.append(shape('circle', { cx: x(xs[j]), cy: y(v), r: 2.5, fill: line.color }));
        }
      });
    });

    drawThresholds(root, thresholds, y, w);

    const cursor = shape('line', { class: 'cursor', y1: M.top, y2: M.top + h, visibility: 'hidden' });
    root.append(cursor);
    const hit = shape('rect', { x: M.left, y: M.top, width: w, height: h, fill: 'transparent' });
    root.append(hit);

    const legend = fig.querySelector('.legend');
    const showAt = (j) => {
      legend.replaceChildren();
      lines.forEach((line) => {
        const item = node('span', { class: 'item' });
        const swatch = shape('svg', { viewBox: '0 0 22 10', 'aria-hidden': 'true' });
        swatch.append(spec.kind === 'stack'
          ? shape('rect', { x: 2, y: 1, width: 18, height: 8, fill: line.color })
          : shape('line', {
            x1: 1, x2: 21, y1: 5, y2: 5, stroke: line.color, 'stroke-width': 2.5,
            'stroke-dasharray': line.dash,
          }));
        const v = j == null ? null : line.values[j];
        item.append(swatch, document.createTextNode(line.name), node('span', { class: 'value' }, unit.value(v)));
        legend.append(item);
      });
      for (const th of thresholds) {
        legend.append(node('span', { class: 'item' }, `- · - ${th.label}`));
      }
    };
    const latest = () => {
      for (let j = xs.length - 1; j >= 0; j -= 1) {
        if (lines.some((l) => l.values[j] != null)) return j;
      }
      return null;
    };
    showAt(latest());
    hit.addEventListener('pointermove', (ev) => {
      const box = root.getBoundingClientRect();
      const px = ((ev.clientX - box.left) / box.width) * width;
      const t = t0 + ((px - M.left) / w) * (t1 - t0);
      let best = null;
      xs.forEach((tx, j) => {
        if (best == null || Math.abs(tx - t) < Math.abs(xs[best] - t)) best = j;
      });
      if (best == null) return;
      cursor.setAttribute('x1', x(xs[best]));
      cursor.setAttribute('x2', x(xs[best]));
      cursor.setAttribute('visibility', 'visible');
      showAt(best);
    });
    hit.addEventListener('pointerleave', () => {
      cursor.setAttribute('visibility', 'hidden');
      showAt(latest());
    });

    plot.replaceChildren(root);
    if (!lines.some((l) => l.values.some((v) => v != null && (spec.kind !== 'stack' || v > 0)))) {
      plot.append(node('div', { class: 'empty' }, 'no data in this range'));
    }
  }

  // Input tokens (x, log scale when they span more than two decades) vs
  // TTFT (y).
  function drawScatter(fig, samples, thresholds) {
    const plot = fig.querySelector('.plot');
    const width = Math.max(plot.clientWidth, 240);
    const height = plot.clientHeight || 200;
    const w = width - M.left - M.right;
    const h = height - M.top - M.bottom;
    let xMin = Infinity;
    let xMax = 0;
    let yMaxSeen = 0;
    for (const [, n, ttft] of samples) {
      xMin = Math.min(xMin, n);
      xMax = Math.max(xMax, n);
      yMaxSeen = Math.max(yMaxSeen, ttft);
    }
    for (const th of thresholds) yMaxSeen = Math.max(yMaxSeen, th.value);
    if (!samples.length) {
      xMin = 1;
      xMax = 1000;
    }
    const log = xMin > 0 && xMax / xMin > 100;
    const ys = ticks(0, yMaxSeen > 0 ? yMaxSeen * 1.08 : 1, 4);
    const yMax = ys[ys.length - 1];
    let xs;
    let fx;
    if (log) {
      const lo = Math.floor(Math.log10(xMin));
      const hi = Math.ceil(Math.log10(xMax));
      xs = [];
      for (let e = lo; e <= hi; e += 1) xs.push(10 ** e);
      fx = (n) => M.left + ((Math.log10(Math.max(n, 1)) - lo) / Math.max(hi - lo, 1)) * w;
    } else {
      xs = ticks(0, xMax, 5);
      fx = (n) => M.left + (n / xs[xs.length - 1]) * w;
    }
    const fy = (v) => M.top + h - (v / yMax) * h;
    const root = shape('svg', {
      viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-labelledby': 'title-scatter',
    });
    for (const v of ys) {
      root.append(shape('line', { class: 'grid', x1: M.left, x2: M.left + w, y1: fy(v), y2: fy(v) }));
      root.append(shape('text', { x: M.left - 6, y: fy(v) + 4, 'text-anchor': 'end' }, seconds(v)));
    }
    for (const n of xs) {
      root.append(shape('text', { x: fx(n), y: height - 6, 'text-anchor': 'middle' }, count(n)));
    }
    const dots = shape('g', {
      'data-series': 'requests', 'data-points': samples.length, 'data-max': peak(samples.map((x) => x[2])),
    });
    for (const [, n, ttft] of samples) {
      dots.append(shape('circle', {
        cx: fx(n).toFixed(1), cy: fy(ttft).toFixed(1), r: 3, fill: C.blue, 'fill-opacity': 0.55,
      }));
    }
    root.append(dots);
    drawThresholds(root, thresholds, fy, w);
    plot.replaceChildren(root);
    if (!samples.length) plot.append(node('div', { class: 'empty' }, 'no requests with input tokens and a first token'));
    const legend = fig.querySelector('.legend');
    legend.replaceChildren(node('span', { class: 'item' },
      `${samples.length} request${samples.length === 1 ? '' : 's'}; x: input tokens${log ? ' (log scale)' : ''}, y: TTFT`));
  }

  // ---------- the charts of the page ----------

  const CHARTS = [
    { id: 'ttft', title: 'Time to first token', unit: 'seconds', objective: 'ttft' },
    { id: 'tpot', title: 'Time per output token', unit: 'seconds', objective: 'tpot' },
    { id: 'itl', title: 'Inter-token latency', unit: 'seconds' },
    { id: 'e2el', title: 'End-to-end latency', unit: 'seconds', objective: 'e2el' },
    {
      id: 'goodput', title: 'Goodput ratio', unit: 'ratio', max: 1,
      note: 'Share of judged requests that met every objective the class requires.',
    },
    {
      id: 'throughput', title: 'Requests: all vs good', unit: 'rate',
      note: 'Throughput rising while good requests fall is the trade-off to watch.',
    },
    { id: 'tokens', title: 'Output tokens: all vs good', unit: 'rate' },
    {
      id: 'phases', title: 'Where request time goes', unit: 'ratio', kind: 'stack', max: 1,
      note: PHASE_NOTES.headers,
    },
    {
      id: 'headers', title: 'Response headers vs first token', unit: 'seconds',
      note: 'A server that sends its head when work starts shows queueing in the first, prefill in the gap.',
    },
    { id: 'outcomes', title: 'Outcomes', unit: 'rate', kind: 'stack' },
    { id: 'in_flight', title: 'Requests in flight', unit: 'count' },
    { id: 'scatter', title: 'Input tokens vs time to first token', kind: 'scatter', note: 'The latest requests; do long prompts drive first-token latency?' },
  ];

  // The trade-off row: latency against load, and what the engine and the
  // GPUs do beside it (drawn when the route's engine or GPUs are scraped;
  // their lines start when the page opens).
  const TRADE_OFF = [
    {
      id: 'load', title: 'Latency vs load', kind: 'load',
      note: 'Each bucket: the concurrency requests met on arrival; the line: the class objective\'s percentile there.',
    },
    {
      id: 'engine', title: 'KV cache and GPU activity', unit: 'ratio', max: 1, telemetry: true,
      note: 'KV cache in use near 100 %: requests wait for memory. DRAM active high with SM active low: decode bound by memory bandwidth.',
    },
    { id: 'queue', title: 'Engine queue', unit: 'count', telemetry: true },
    {
      id: 'per_gpu', title: 'Output tokens per GPU-second', unit: 'count', telemetry: true,
      note: 'Over the last minute, on the route\'s GPUs: what a good token costs in GPU time.',
    },
  ];

  // One sample of the route's engine and GPU figures (null where unknown).
  function engineSample(report) {
    if (!view.key || !report.telemetry) return null;
    const [route, slo] = view.key.split('\u0000');
    const r = report.telemetry.routes.find((x) => x.route === route);
    if (!r || (!r.engine && !r.gpus)) return null;
    const models = r.engine ? r.engine.models : [];
    const fold = (key, f) => models.reduce((acc, m) => (m[key] == null ? acc : f(acc ?? 0, m[key])), null);
    const pg = (r.per_gpu_second || []).find((p) => p.slo === slo && p.window === '1m');
    return {
      t: Date.now() / 1000,
      kv: fold('kv_cache_usage_ratio', Math.max),
      running: fold('running', (a, b) => a + b),
      waiting: fold('waiting', (a, b) => a + b),
      sm: r.gpus ? r.gpus.sm_active_ratio.mean : null,
      dram: r.gpus ? r.gpus.dram_active_ratio.mean : null,
      good: pg ? pg.good_output_tokens : null,
      all: pg ? pg.output_tokens : null,
    };
  }

  function engineLines(id, samples) {
    const of = (key) => samples.map((p) => p[key]);
    switch (id) {
      case 'engine':
        return [
          { name: 'KV cache use', color: C.orange, dash: '', values: of('kv') },
          { name: 'SM active (mean)', color: C.blue, dash: '7 3', values: of('sm') },
          { name: 'DRAM active (mean)', color: C.purple, dash: '2 3', values: of('dram') },
        ];
      case 'queue':
        return [
          { name: 'running', color: C.blue, dash: '', values: of('running') },
          { name: 'waiting', color: C.vermillion, dash: '7 3', values: of('waiting') },
        ];
      default:
        return [
          { name: 'good', color: C.green, dash: '', values: of('good') },
          { name: 'all', color: C.blue, dash: '7 3', values: of('all') },
        ];
    }
  }

  function drawTradeOff() {
    const box = document.getElementById('trade-off');
    if (!box.children.length) {
      for (const chart of TRADE_OFF) box.append(figure(chart));
    }
    const [route, slo] = view.key ? view.key.split('\u0000') : [null, null];
    const judged = (c) => {
      const w = c.windows.find((x) => x.window === '5m');
      return w ? w.buckets.reduce((n, b) => n + b.judged, 0) : 0;
    };
    const curve = view.capacity
      .filter((c) => c.route === route && c.slo === slo)
      .sort((a, b) => judged(b) - judged(a))[0] || null;
    const threshold = (kind) => thresholdsFor(kind)[0] || null;
    tokenmeterDrawLoad(box.querySelector('[data-chart="load"]'), curve, '5m', {
      node, shape, ticks, seconds, percent, C, M, thresholdFor: threshold,
    });
    const samples = view.engine;
    const t1 = samples.length ? samples[samples.length - 1].t : Date.now() / 1000;
    const t0 = t1 - Math.max(120, samples.length ? t1 - samples[0].t : 0);
    for (const chart of TRADE_OFF.filter((c) => c.telemetry)) {
      const fig = box.querySelector(`[data-chart="${chart.id}"]`);
      fig.hidden = !samples.length;
      if (samples.length) {
        drawSeries(fig, { ...chart, step: REFRESH_MS / 1000 }, samples.map((p) => p.t), engineLines(chart.id, samples), [], t0, t1);
      }
    }
  }

  function drawBill() {
    tokenmeterDrawBill(document.getElementById('bill'), view.chargeback, view.bill, {
      node, shape, ticks, count, percent, duration, C, M,
    });
  }

  function drawSessions() {
    const route = view.key ? view.key.split('\u0000')[0] : null;
    tokenmeterDrawSessions(document.getElementById('sessions'), view.sessions, route, view.sessionsWindow, {
      node, count, percent, seconds,
    });
  }

  // The phases chart splits completed streams by the server's own timings
  // where it reports them, else at the response head and the first token.
  function phaseLines(points) {
    const engine = points.some((p) => p.engine_phases && p.engine_phases.requests > 0);
    const parts = engine
      ? [
        ['queue_seconds', 'queue', C.grey],
        ['prefill_seconds', 'prefill', C.orange],
        ['decode_seconds', 'decode', C.blue],
        ['outside_seconds', 'outside the engine', C.purple],
      ]
      : [
        ['headers_seconds', 'to response head', C.grey],
        ['first_token_seconds', 'head to first token', C.orange],
        ['decode_seconds', 'decode', C.blue],
      ];
    const of = (p) => (engine ? p.engine_phases : p.phases);
    const lines = parts.map(([key, name, color]) => ({
      name,
      color,
      values: points.map((p) => {
        const ph = of(p);
        const total = parts.reduce((sum, [k]) => sum + ph[k], 0);
        return ph.requests > 0 && total > 0 ? ph[key] / total : null;
      }),
    }));
    return { lines, note: engine ? PHASE_NOTES.engine : PHASE_NOTES.headers };
  }

  function quantileLines(points, key) {
    return ['p50', 'p95', 'p99'].map((q, i) => ({
      name: q,
      color: [C.blue, C.orange, C.purple][i],
      dash: DASH[q],
      values: points.map((p) => p[key][q]),
    }));
  }

  function thresholdsFor(kind) {
    const objectives = (view.history && view.history.objectives) || [];
    return objectives
      .filter((o) => o.objective === kind)
      .map((o) => ({ value: o.threshold_seconds, label: `SLO ${seconds(o.threshold_seconds)} for ${percent(o.target)}` }));
  }

  function linesFor(chart, points) {
    const per = (f) => points.map((p) => f(p) / p.seconds);
    switch (chart.id) {
      case 'ttft': case 'tpot': case 'itl': case 'e2el':
        return quantileLines(points, chart.id);
      case 'goodput':
        return [{
          name: 'good / judged', color: C.green, dash: '',
          values: points.map((p) => (p.good + p.bad > 0 ? p.good / (p.good + p.bad) : null)),
        }];
      case 'throughput':
        return [
          { name: 'requests', color: C.blue, dash: '', values: per((p) => p.requests) },
          { name: 'good', color: C.green, dash: '7 3', values: per((p) => p.good) },
        ];
      case 'tokens':
        return [
          { name: 'output tokens', color: C.blue, dash: '', values: per((p) => p.output_tokens) },
          { name: 'of good requests', color: C.green, dash: '7 3', values: per((p) => p.good_output_tokens) },
        ];
      case 'headers':
        return [
          { name: 'headers p50', color: C.grey, dash: '', values: points.map((p) => p.headers.p50) },
          { name: 'headers p95', color: C.grey, dash: DASH.p95, values: points.map((p) => p.headers.p95) },
          { name: 'TTFT p50', color: C.blue, dash: '', values: points.map((p) => p.ttft.p50) },
          { name: 'TTFT p95', color: C.blue, dash: DASH.p95, values: points.map((p) => p.ttft.p95) },
        ];
      case 'outcomes':
        return OUTCOMES.map(([key, name, color]) => ({
          name, color, values: per((p) => p.outcomes[key]),
        }));
      case 'in_flight':
        return [{ name: 'peak', color: C.blue, dash: '', values: points.map((p) => p.in_flight_peak) }];
      default:
        return [];
    }
  }

  function drawCharts() {
    const box = document.getElementById('charts');
    if (!box.children.length) {
      for (const chart of CHARTS) box.append(figure(chart));
    }
    const points = view.points;
    const t1 = points.length ? points[points.length - 1].t + points[points.length - 1].seconds : Date.now() / 1000;
    // The chosen range, or from a little before the first point when the
    // series is younger (at least two minutes).
    const age = points.length ? t1 - points[0].t + 30 : view.range;
    const t0 = t1 - Math.min(view.range, Math.max(age, 120));
    const shown = points.filter((p) => p.t >= t0);
    const xs = shown.map((p) => p.t + p.seconds / 2);
    for (const chart of CHARTS) {
      const fig = box.querySelector(`[data-chart="${chart.id}"]`);
      if (chart.kind === 'scatter') {
        drawScatter(fig, view.scatter.filter((s) => s[0] >= t0), thresholdsFor('ttft'));
        continue;
      }
      let thresholds = chart.objective ? thresholdsFor(chart.objective) : [];
      if (chart.id === 'goodput' && view.history && view.history.goodput_target != null) {
        thresholds = [{ value: view.history.goodput_target, label: `target ${percent(view.history.goodput_target)}` }];
      }
      let lines;
      if (chart.id === 'phases') {
        const phases = phaseLines(shown);
        fig.querySelector('.note').textContent = phases.note;
        lines = phases.lines;
      } else {
        lines = linesFor(chart, shown);
      }
      const step = view.history ? view.history.point_seconds : 10;
      drawSeries(fig, { ...chart, step }, xs, lines, thresholds, t0, t1);
    }
  }

  // ---------- now and objectives ----------

  function drawNow() {
    const s = view.series;
    const w = s && s.windows.find((x) => x.window === '5m');
    const set = (stat, text) => {
      document.querySelector(`[data-stat="${stat}"] .value`).textContent = text;
    };
    set('goodput', w && w.goodput ? percent(w.goodput.ratio) : '–');
    set('good_rate', w && w.goodput ? `${count(w.goodput.rate)}/s` : '–');
    set('request_rate', w ? `${count(w.request_rate)}/s` : '–');
    set('token_rate', w ? `${count(w.output_token_rate)}/s` : '–');
    set('in_flight', s ? String(s.in_flight) : '–');
  }

  function drawObjectives() {
    const body = document.getElementById('objective-rows');
    const status = (view.series && view.series.status) || [];
    if (!status.length) {
      body.replaceChildren(node('tr', {}, null));
      body.firstChild.append(node('td', { colspan: 7 }, 'This series has no SLO class.'));
      return;
    }
    const rows = status.map((o) => {
      const tr = node('tr', { 'data-objective': o.objective, 'data-state': o.state });
      const badge = node('span', { class: `state state-${o.state}` }, STATES[o.state] || o.state);
      const name = o.threshold_seconds == null
        ? 'Goodput (good / judged)'
        : `${OBJECTIVE_NAMES[o.objective] || o.objective} ≤ ${seconds(o.threshold_seconds)}`;
      const burn = (v) => (v == null ? '–' : trim(v, 2));
      const b = o.budget;
      const left = b.left == null ? '–' : `${percent(Math.max(b.left, 0))}${b.left < 0 ? ' (overspent)' : ''}`;
      const cells = [
        badge,
        name,
        percent(o.target),
        percent(o.ratio_5m),
        percent(o.ratio_1h),
        `${burn(o.burn_rate_5m)} / ${burn(o.burn_rate_1h)}`,
        `${left} of ${duration(b.window_seconds)}${b.seconds < b.window_seconds ? ` (${duration(b.seconds)} seen)` : ''}`,
      ];
      for (const c of cells) {
        const td = node('td');
        if (typeof c === 'string') td.textContent = c;
        else td.append(c);
        tr.append(td);
      }
      return tr;
    });
    body.replaceChildren(...rows);
  }

  // ---------- data ----------

  function keyOf(s) {
    return `${s.route}\u0000${s.slo}`;
  }

  function labelOf(s) {
    return `${s.route} · ${s.slo || 'no SLO class'}`;
  }

  function fromHash() {
    const q = new URLSearchParams(location.hash.slice(1));
    const range = Number(q.get('range'));
    if ([900, 1800, 3600].includes(range)) view.range = range;
    if (['1m', '5m', '1h'].includes(q.get('bill'))) view.bill = q.get('bill');
    if (q.has('route')) view.key = `${q.get('route')}\u0000${q.get('slo') || ''}`;
  }

  function toHash() {
    if (!view.key) return;
    const [route, slo] = view.key.split('\u0000');
    const q = new URLSearchParams({ route, slo, range: String(view.range), bill: view.bill });
    history.replaceState(null, '', `#${q}`);
  }

  function fillSelect(report) {
    const select = document.getElementById('series');
    const keys = report.series.map(keyOf);
    const known = [...select.options].map((o) => o.value);
    if (keys.length && keys.join('\n') !== known.join('\n')) {
      select.replaceChildren(...report.series.map((s) => node('option', { value: keyOf(s) }, labelOf(s))));
      select.disabled = false;
    }
    if (!keys.includes(view.key)) {
      // The first series with a class, else the first.
      const first = report.series.find((s) => s.slo && s.status.length) || report.series[0];
      view.key = first ? keyOf(first) : null;
      view.points = [];
      view.scatter = [];
      view.engine = [];
    }
    if (view.key) select.value = view.key;
  }

  async function json(url) {
    const r = await fetch(url, { cache: 'no-store' });
    if (!r.ok) throw new Error(`${url}: ${r.status}`);
    return r.json();
  }

  async function refresh() {
    const report = await json('slo');
    fillSelect(report);
    view.series = report.series.find((s) => keyOf(s) === view.key) || null;
    view.capacity = report.capacity || [];
    view.chargeback = report.chargeback || null;
    view.sessions = report.sessions || null;
    const sample = engineSample(report);
    if (sample) view.engine = view.engine.filter((p) => p.t >= sample.t - 3600).concat([sample]);
    if (view.key) {
      const [route, slo] = view.key.split('\u0000');
      const last = view.points.length ? view.points[view.points.length - 1].t : null;
      const q = new URLSearchParams({ route, slo });
      if (last != null) q.set('since', String(last));
      const h = (await json(`slo/history?${q}`)).series[0];
      if (h && keyOf(h) === view.key) {
        view.history = h;
        const from = h.points.length ? h.points[0].t : Infinity;
        view.points = view.points.filter((p) => p.t < from).concat(h.points);
        const since = last == null ? -Infinity : last;
        view.scatter = view.scatter.filter((s) => s[0] < since).concat(h.scatter);
        const keep = (view.points.length ? view.points[view.points.length - 1].t : 0) - 3600;
        view.points = view.points.filter((p) => p.t >= keep);
        view.scatter = view.scatter.slice(-500).filter((s) => s[0] >= keep);
      }
    }
    toHash();
    drawNow();
    drawObjectives();
    drawTradeOff();
    drawBill();
    drawSessions();
    drawCharts();
  }

  let timer = null;
  async function loop() {
    clearTimeout(timer);
    const updated = document.getElementById('updated');
    try {
      await refresh();
      updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
      updated.classList.remove('stale');
      document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
    } catch (e) {
      updated.textContent = `cannot reach tokenmeter (${e.message}); retrying`;
      updated.classList.add('stale');
    }
    timer = setTimeout(loop, REFRESH_MS);
  }

  function start() {
    fromHash();
    document.getElementById('series').addEventListener('change', (ev) => {
      view.key = ev.target.value;
      view.points = [];
      view.scatter = [];
      view.engine = [];
      loop();
    });
    for (const b of document.querySelectorAll('[data-range]')) {
      b.addEventListener('click', () => {
        view.range = Number(b.dataset.range);
        for (const o of document.querySelectorAll('[data-range]')) {
          o.setAttribute('aria-pressed', String(o === b));
        }
        toHash();
        drawCharts();
      });
      b.setAttribute('aria-pressed', String(Number(b.dataset.range) === view.range));
    }
    for (const b of document.querySelectorAll('[data-bill-window]')) {
      b.addEventListener('click', () => {
        view.bill = b.dataset.billWindow;
        toHash();
        drawBill();
      });
    }
    for (const b of document.querySelectorAll('[data-sessions-window]')) {
      b.addEventListener('click', () => {
        view.sessionsWindow = b.dataset.sessionsWindow;
        drawSessions();
      });
    }
    let pending = false;
    new ResizeObserver(() => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        if (view.points.length) drawCharts();
        drawTradeOff();
        drawBill();
      });
    }).observe(document.getElementById('charts'));
    loop();
  }

  start();
})();
