// The admin page's "Sessions" section: the picked route's entry of /slo's
// `sessions` (the busiest route's where the picked one has no session)
// over the chosen live window. The sessions open now, those
// that ended in the window and their time in the model against outside it
// (tools, client, people), the follow-up cache-hit ratio, TTFT p50 and p90
// by kind of turn, and the costliest sessions with their keys as /slo
// shortens them. Loaded before page.js, which calls
// `tokenmeterDrawSessions(section, sessions, route, window, h)`. Every
// text from the server goes through textContent or an attribute.
'use strict';

const SESSION_WINDOWS = { '1m': '1 min', '5m': '5 min', '1h': '1 h' };
const TURN_NAMES = {
  first: 'first', tool_result: 'tool result', follow_up: 'follow-up', none: 'no conversation',
};

// eslint-disable-next-line no-unused-vars
function tokenmeterDrawSessions(section, sessions, route, windowName, h) {
  const { node, count, percent, seconds } = h;
  for (const b of section.querySelectorAll('[data-sessions-window]')) {
    b.setAttribute('aria-pressed', String(b.dataset.sessionsWindow === windowName));
  }
  const routes = sessions ? sessions.routes : [];
  // The picked route's; where it has no session, the route with the most.
  const many = (r) => r.active + r.windows.reduce((n, w) => Math.max(n, w.ended.sessions), 0);
  let entry = routes.find((r) => r.route === route) || null;
  if (!entry || !many(entry)) {
    const busiest = routes.filter((r) => many(r) > 0).sort((a, b) => many(b) - many(a))[0];
    entry = busiest || entry;
  }
  section.querySelector('h2').textContent = entry ? `Sessions on ${entry.route}` : 'Sessions';
  const win = entry ? entry.windows.find((w) => w.window === windowName) || null : null;
  const body = section.querySelector('#sessions-body');
  section.dataset.route = entry ? entry.route : '';
  section.dataset.window = windowName;
  const note = section.querySelector('#sessions-none');
  note.hidden = !!win;
  body.hidden = !win;
  if (!win) return;

  const ended = win.ended;
  const stat = (name, label, value, raw) => {
    const d = node('div', { class: 'stat', 'data-session-stat': name, 'data-value': raw == null ? '' : String(raw) });
    d.append(node('span', { class: 'label' }, label), node('span', { class: 'value' }, value));
    return d;
  };
  const outside = ended.duration_seconds > 0 ? ended.gap_seconds / ended.duration_seconds : null;
  const stats = section.querySelector('#sessions-stats');
  stats.replaceChildren(
    stat('active', 'Open now', count(entry.active), entry.active),
    stat('ended', `Ended, last ${SESSION_WINDOWS[windowName] || windowName}`, count(ended.sessions), ended.sessions),
    stat('model_share', 'In the model', percent(win.model_share), win.model_share),
    stat('outside_share', 'Outside (tools, client, people)', percent(outside), outside),
    stat('cache_hit', 'Follow-up cache hits', percent(win.follow_up_cache_hit_ratio), win.follow_up_cache_hit_ratio),
  );

  // Model against outside time of the sessions that ended, as one bar.
  const split = section.querySelector('#sessions-split');
  const meter = node('meter', { min: '0', max: '1', value: String(win.model_share ?? 0), 'aria-label': 'Share of the sessions\' time in the model' });
  split.replaceChildren(
    meter,
    node('span', {}, ended.sessions
      ? `${seconds(ended.model_seconds)} in the model, ${seconds(ended.gap_seconds)} outside it over ${count(ended.gaps)} gaps, in ${count(ended.sessions)} sessions of ${count(ended.turns)} turns`
      : 'No session ended in this window.'),
  );

  const turns = section.querySelector('#sessions-turns');
  turns.replaceChildren(...win.turns.filter((t) => t.requests > 0).map((t) => {
    const tr = node('tr', {
      'data-turn': t.turn,
      'data-requests': String(t.requests),
      'data-p50': t.ttft.p50 == null ? '' : String(t.ttft.p50),
      'data-p90': t.ttft.p90 == null ? '' : String(t.ttft.p90),
    });
    const hit = t.cached_prompt_tokens != null && t.prompt_tokens > 0 ? t.cached_prompt_tokens / t.prompt_tokens : null;
    tr.append(
      node('td', {}, TURN_NAMES[t.turn] || t.turn),
      node('td', {}, count(t.requests)),
      node('td', {}, seconds(t.ttft.p50)),
      node('td', {}, seconds(t.ttft.p90)),
      node('td', {}, count(t.prompt_tokens)),
      node('td', {}, percent(hit)),
    );
    return tr;
  }));
  if (!turns.children.length) turns.append(emptyRow(node, 6, 'No request finished in this window.'));

  const costliest = section.querySelector('#sessions-costliest');
  costliest.replaceChildren(...win.costliest.map((s) => {
    const tr = node('tr', {
      'data-session': s.key,
      'data-turns': String(s.turns),
      'data-cost': s.cost == null ? '' : String(s.cost),
      'data-gpu-seconds': String(s.gpu_seconds),
      'data-tenant': s.tenant,
    });
    const cost = s.cost != null ? `${Number(s.cost.toPrecision(3))} ${s.currency || ''}`.trim() : '–';
    tr.append(
      node('td', { class: 'key' }, s.key),
      node('td', {}, s.tenant),
      node('td', {}, count(s.turns)),
      node('td', {}, seconds(s.duration_seconds)),
      node('td', {}, seconds(s.model_seconds)),
      node('td', {}, seconds(s.gap_seconds)),
      node('td', {}, `${count(s.gpu_seconds)} GPU-s`),
      node('td', {}, cost),
      node('td', {}, s.good ? 'good' : 'missed'),
    );
    return tr;
  }));
  if (!costliest.children.length) costliest.append(emptyRow(node, 9, 'No session ended in this window.'));
}

// A table's one row when it has nothing to list.
function emptyRow(node, columns, text) {
  const tr = node('tr');
  tr.append(node('td', { colspan: String(columns) }, text));
  return tr;
}
