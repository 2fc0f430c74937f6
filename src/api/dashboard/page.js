'use strict';
// The dashboard: polls /dashboard/data, keeps a short history in memory and draws it. Every
// string from the data goes into the DOM as text (textContent, setAttribute), never as markup.
(() => {
  const POLL_MS = 2000; // how often to poll /dashboard/data
  const HISTORY = 150; // points kept per series (150 × 2 s = 5 min)
  const FETCH_TIMEOUT_MS = 5000;
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const PALETTE = ['#3182ce', '#dd6b20', '#38a169', '#805ad5', '#d53f8c', '#319795', '#975a16', '#718096'];
  const PCT = [['p50', '#38a169'], ['p95', '#dd6b20'], ['p99', '#c53030']];

  const history = []; // [{t: server ms, d: data}]
  const cards = new Map(); // task name → {root, fields}

  // ---- small DOM helpers ----
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function setText(node, text, cls) {
    node.textContent = text;
    if (cls !== undefined) node.className = cls;
  }
  const $ = (id) => document.getElementById(id);

  // ---- formatting ----
  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  const dash = '\u2013';
  function fmtSecs(s) {
    if (!isNum(s)) return dash;
    return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
  }
  function fmtPct(r, digits = 1) {
    return isNum(r) ? `${(r * 100).toFixed(digits)} %` : dash;
  }
  function fmtCount(n) {
    return isNum(n) ? (Math.round(n) + 0).toLocaleString('en-US') : dash;
  }
  function fmtRate(n) {
    return isNum(n) ? (n >= 10 ? n.toFixed(0) : n.toFixed(2)) : dash;
  }
  function fmtAge(s) {
    if (!isNum(s)) return 'never';
    return s < 60 ? `${s.toFixed(1)} s` : `${Math.round(s / 60)} min`;
  }
  function bar(ratio, bad) {
    const inner = el('span');
    inner.style.width = `${Math.max(0, Math.min(1, isNum(ratio) ? ratio : 0)) * 100}%`;
    return el('span', { class: bad ? 'bar bad' : 'bar' }, inner);
  }

  // ---- the line chart: series of [t, value|null] against a time window ----
  function lineChart(root, { series, refs = [], t1, yFmt, minTop = 0 }) {
    const W = 560, H = 170, L = 58, R = 10, T = 10, B = 22;
    const span = HISTORY * POLL_MS;
    const t0 = t1 - span;
    let top = minTop;
    for (const s of series) for (const [, v] of s.points) if (isNum(v)) top = Math.max(top, v);
    for (const r of refs) top = Math.max(top, r.y);
    top = top > 0 ? top * 1.15 : 1;
    const x = (t) => L + ((t - t0) / span) * (W - L - R);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    root.setAttribute('viewBox', `0 0 ${W} ${H}`);
    root.replaceChildren();
    for (const f of [0, 0.5, 1]) {
      const v = top * f;
      root.append(svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: '#e2e8f0' }));
      root.append(svg('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, yFmt(v)));
    }
    root.append(svg('text', { x: L, y: H - 6 }, `-${Math.round(span / 60000)} min`));
    root.append(svg('text', { x: W - R, y: H - 6, 'text-anchor': 'end' }, 'now'));
    for (const r of refs) {
      const attrs = { x1: L, x2: W - R, y1: y(r.y), y2: y(r.y), stroke: r.color, 'stroke-dasharray': '6 4' };
      root.append(svg('line', attrs));
      root.append(svg('text', { x: W - R - 4, y: y(r.y) - 4, 'text-anchor': 'end' }, r.label));
    }
    let drawn = 0;
    for (const s of series) {
      let run = [];
      const flush = () => {
        if (run.length === 1) {
          root.append(svg('circle', { cx: run[0][0], cy: run[0][1], r: 2.5, fill: s.color }));
        } else if (run.length > 1) {
          const points = run.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' ');
          root.append(svg('polyline', { points, fill: 'none', stroke: s.color, 'stroke-width': 2 }));
        }
        drawn += run.length;
        run = [];
      };
      for (const [t, v] of s.points) {
        if (isNum(v) && t >= t0) run.push([x(t), y(v)]);
        else flush();
      }
      flush();
    }
    if (drawn === 0) {
      root.append(svg('text', { x: (L + W) / 2, y: H / 2, 'text-anchor': 'middle' }, 'no data yet'));
    }
  }
  function legend(root, items) {
    root.replaceChildren(...items.map(([name, color, value]) => {
      const swatch = el('i');
      swatch.style.borderColor = color;
      return el('span', {}, swatch, value === undefined ? name : `${name} ${value}`);
    }));
  }

  // ---- per task ----
  function taskCard(name) {
    const f = {};
    const field = (key, tag = 'b') => (f[key] = el(tag, { 'data-field': key }, dash));
    const stat = (label, key) => el('span', {}, label, field(key));
    const root = el('div', { class: 'card task', 'data-task': name },
      el('div', { class: 'head' }, el('h3', {}, name), field('target', 'span')),
      el('div', { class: 'stats' }, stat('p50', 'p50'), stat('p95', 'p95'), stat('p99', 'p99'),
        stat('requests', 'requests'), stat('spills', 'spills'), stat('shed', 'shed')));
    f.chart = svg('svg', { class: 'chart', 'data-field': 'chart', role: 'img' });
    f.legend = el('div', { class: 'legend' });
    const row = (label, slo) => el('tr', {}, el('td', {}, label),
      ...['5m', '1h'].map((w) => el('td', {}, field(`${slo}-${w}`, 'span'))),
      el('td', {}, field(`${slo}-budget`, 'span'), (f[`${slo}-budget-bar`] = el('span'))),
      el('td', {}, field(`${slo}-burn`, 'span')));
    const table = el('table', {},
      el('thead', {}, el('tr', {},
        ...['SLO', '5m', '1h', 'budget left (6h)', 'burn (1h)'].map((h) => el('th', {}, h)))),
      el('tbody', {}, row('TTFT', 'ttft'), row('availability', 'availability')));
    root.append(f.chart, f.legend, table);
    return { root, f };
  }

  function renderTasks(d) {
    const box = $('tasks');
    const names = new Set(d.tasks.map((t) => t.name));
    for (const [name, card] of cards) if (!names.has(name)) { card.root.remove(); cards.delete(name); }
    for (const t of d.tasks) {
      let card = cards.get(t.name);
      if (!card) { card = taskCard(t.name); cards.set(t.name, card); }
      box.append(card.root); // keeps config order
      const f = card.f;
      setText(f.target, `SLO ${fmtSecs(t.ttft_target_s)} for ${fmtPct(t.objective, 1)}`);
      f.target.className = 'muted';
      for (const [p] of PCT) {
        const v = t[`${p}_s`];
        setText(f[p], fmtSecs(v), isNum(v) && v > t.ttft_target_s ? 'bad' : '');
      }
      setText(f.requests, fmtCount(t.requests));
      f.requests.dataset.value = isNum(t.requests) ? String(t.requests) : '';
      setText(f.spills, fmtCount(t.spills));
      setText(f.shed, fmtCount(t.shed), t.shed > 0 ? 'bad' : '');
      for (const [slo, objective] of [['ttft', t.objective], ['availability', t.availability_objective]]) {
        for (const w of ['5m', '1h']) {
          const a = t.attainment[slo][w];
          setText(f[`${slo}-${w}`], fmtPct(a, 2), !isNum(a) ? 'muted' : a < objective ? 'bad' : 'good');
        }
        const left = t.budget_left[slo];
        setText(f[`${slo}-budget`], fmtPct(left, 0), isNum(left) && left <= 0.1 ? 'bad' : '');
        f[`${slo}-budget-bar`].replaceChildren(bar(left, isNum(left) && left <= 0.1));
        const burn = t.burn[slo]['1h'];
        const burnText = isNum(burn) ? `${burn.toFixed(2)}\u00d7` : dash;
        setText(f[`${slo}-burn`], burnText, isNum(burn) && burn > 1 ? 'bad' : '');
      }
      const series = PCT.map(([p, color]) => ({
        color, points: history.map((h) => [h.t, (h.d.tasks.find((x) => x.name === t.name) || {})[`${p}_s`]]),
      }));
      const refs = [{ y: t.ttft_target_s, color: '#c53030', label: `SLO ${fmtSecs(t.ttft_target_s)}` }];
      lineChart(f.chart, { series, refs, t1: d.now_ms, yFmt: fmtSecs });
      legend(f.legend, PCT.map(([p, color]) => [p, color]).concat([['SLO', '#c53030']]));
    }
  }

  // ---- traffic: rates from counter deltas between polls ----
  function rates(pick) {
    const out = [];
    for (let i = 1; i < history.length; i++) {
      const a = history[i - 1], b = history[i];
      const dt = (b.t - a.t) / 1000;
      const va = pick(a.d), vb = pick(b.d);
      const ok = dt > 0 && isNum(va) && isNum(vb) && vb >= va; // a drop: the router restarted
      out.push([b.t, ok ? (vb - va) / dt : null]);
    }
    return out;
  }
  function lastValue(points) {
    const v = points.length ? points[points.length - 1][1] : null;
    return `${fmtRate(v)}/s`;
  }

  function renderTraffic(d) {
    const local = rates((x) => x.counters.local_requests);
    const hosted = rates((x) => x.counters.hosted_requests);
    const series = [{ color: PALETTE[0], points: local }, { color: PALETTE[1], points: hosted }];
    lineChart($('chart-share'), { series, t1: d.now_ms, yFmt: fmtRate, minTop: 0.5 });
    legend($('legend-share'), [
      ['local fleet', PALETTE[0], lastValue(local)],
      ['hosted', PALETTE[1], lastValue(hosted)],
    ]);
    const reasons = new Set();
    for (const h of history) for (const r of Object.keys(h.d.counters.spills_by_reason)) reasons.add(r);
    const spills = [...reasons].sort().map((r, i) => ({
      name: r, color: PALETTE[i % PALETTE.length], points: rates((x) => x.counters.spills_by_reason[r] ?? 0),
    }));
    lineChart($('chart-spills'), { series: spills, t1: d.now_ms, yFmt: fmtRate, minTop: 0.5 });
    legend($('legend-spills'), spills.length
      ? spills.map((s) => [s.name, s.color, lastValue(s.points)])
      : [['no spills yet', '#cbd5e0']]);
  }

  // ---- nodes and providers ----
  function renderNodes(d) {
    const rows = d.nodes.map((n) => {
      const state = n.quarantined
        ? el('span', { class: 'badge bad', 'data-field': 'quarantined' }, 'QUARANTINED')
        : n.held
          ? el('span', { class: 'badge', 'data-field': 'held' }, 'DRAINED')
          : el('span', { class: 'badge good' }, 'serving');
      const gpu = isNum(n.gpu_util)
        ? el('span', {}, fmtPct(n.gpu_util, 0), bar(n.gpu_util))
        : el('span', { class: 'muted' }, 'no agent');
      const stale = !isNum(n.telemetry_age_s) || n.telemetry_age_s > d.telemetry_stale_after_s;
      const breakerClass = n.breaker === 'open' ? 'badge bad' : 'badge';
      const breaker = el('span', { class: breakerClass }, n.breaker.replace('_', '-'));
      const tr = el('tr', { 'data-node': `${n.backend}/${n.node}` },
        el('td', {}, n.backend), el('td', {}, n.node), el('td', {}, state), el('td', {}, breaker),
        el('td', { 'data-field': 'waiting' }, fmtCount(n.waiting)),
        el('td', { 'data-field': 'running' }, fmtCount(n.running)),
        el('td', {}, fmtPct(n.kv_usage, 0), bar(n.kv_usage, n.kv_usage > 0.9)),
        el('td', {}, isNum(n.headroom) ? n.headroom.toFixed(1) : dash),
        el('td', {}, gpu), el('td', { class: stale ? 'bad' : '' }, fmtAge(n.telemetry_age_s)));
      if (n.quarantined) tr.className = 'open';
      return tr;
    });
    document.querySelector('#nodes tbody').replaceChildren(...rows);
    $('nodes-empty').hidden = rows.length > 0;
  }

  function renderBackends(d) {
    const rows = d.backends.map((b) => {
      const weights = Object.entries(b.weight);
      const weightCell = weights.length
        ? el('span', { class: 'weights' },
          ...weights.map(([task, w]) => el('span', {}, `${task} ${fmtPct(w, 0)}`)))
        : el('span', { class: 'muted' }, dash);
      const low = isNum(b.availability) && b.availability < 0.5;
      const avail = b.local
        ? el('span', { class: 'muted' }, 'fleet')
        : el('span', { class: low ? 'bad' : '' }, fmtPct(b.availability, 0), bar(b.availability, low));
      const br = b.breakers;
      const open = el('span', { class: br.open > 0 ? 'bad' : '' }, String(br.open));
      const breakers = el('span', {}, `${br.closed} / ${br.half_open} / `, open);
      const gates = Object.entries(b.gate);
      const gateCell = gates.length
        ? el('span', { class: 'weights' },
          ...gates.map(([task, state]) => el('span', { class: state === 'fail' ? 'bad' : '' }, `${task} ${state}`)))
        : el('span', { class: 'muted' }, dash);
      const tr = el('tr', { 'data-backend': b.backend },
        el('td', {}, b.backend), el('td', {}, b.local ? `${b.kind} (${b.engine})` : b.kind),
        el('td', {}, fmtCount(b.requests)), el('td', {}, avail), el('td', {}, weightCell),
        el('td', {}, breakers), el('td', { class: b.quarantined > 0 ? 'bad' : '' }, String(b.quarantined)),
        el('td', { 'data-field': 'gate' }, gateCell));
      if (br.open > 0) tr.className = 'open';
      return tr;
    });
    document.querySelector('#backends tbody').replaceChildren(...rows);
  }

  function fmtLeft(ms) {
    if (!isNum(ms)) return dash;
    if (ms <= 0) return 'ended';
    const min = ms / 60000;
    return min < 120 ? `${Math.round(min)} min` : `${(min / 60).toFixed(1)} h`;
  }
  function renderBatch(d) {
    const b = d.batch;
    setText($('batch-queued'), fmtCount(b.lines.queued));
    setText($('batch-running'), fmtCount(b.lines.running));
    const share = (v) => el('span', {}, fmtPct(v, 0), bar(v, false));
    const pools = Object.entries(b.occupancy).map(([pool, o]) => el('tr', { 'data-pool': pool },
      el('td', {}, pool), el('td', { 'data-field': 'interactive' }, share(o.interactive)),
      el('td', { 'data-field': 'standard' }, share(o.standard)),
      el('td', { 'data-field': 'batch' }, share(o.batch))));
    document.querySelector('#occupancy tbody').replaceChildren(...pools);
    const jobs = b.jobs.map((j) => {
      const done = j.total > 0 ? (j.succeeded + j.failed) / j.total : 0;
      const plan = j.plan || {};
      const ended = ['completed', 'failed', 'expired', 'cancelled'].includes(j.status);
      return el('tr', { 'data-batch': j.id },
        el('td', {}, j.id), el('td', {}, j.endpoint), el('td', { 'data-field': 'status' }, j.status),
        el('td', { 'data-field': 'done' }, `${fmtCount(j.succeeded + j.failed)} / ${fmtCount(j.total)}`,
          bar(done, j.failed > 0)),
        el('td', { 'data-field': 'route', class: plan.route && plan.route !== 'fleet' ? 'bad' : '' },
          plan.route ? plan.route.replace('_', ' ') : dash),
        el('td', { 'data-field': 'reason' }, plan.reason || dash),
        el('td', {}, ended ? dash : fmtLeft(j.expires_ms - d.now_ms)));
    });
    document.querySelector('#batch-jobs tbody').replaceChildren(...jobs);
    $('batch-empty').hidden = jobs.length > 0;
  }

  function renderHeader(d) {
    const c = d.counters;
    const total = $('requests-total');
    setText(total, fmtCount(c.requests_total));
    total.dataset.value = isNum(c.requests_total) ? String(c.requests_total) : '';
    const served = c.local_requests + c.hosted_requests;
    setText($('local-share'), served > 0 ? fmtPct(c.local_requests / served, 0) : dash);
    setText($('spills-total'), fmtCount(Object.values(c.spills_by_reason).reduce((a, b) => a + b, 0)));
    setText($('shed-total'), fmtCount(c.shed_total));
    setText($('updated'), `updated ${new Date(d.now_ms).toLocaleTimeString()}`);
  }

  function render(d) {
    history.push({ t: d.now_ms, d });
    while (history.length > HISTORY) history.shift();
    renderHeader(d);
    renderTasks(d);
    renderTraffic(d);
    renderNodes(d);
    renderBackends(d);
    renderBatch(d);
  }

  // ---- top spenders: /admin/spenders, behind the admin token (kept in memory only) ----
  const SPENDERS_MS = 30000; // spend moves slowly, and each read sums the month's ledger
  let adminToken = null;
  let spendersTimer = null;
  function fmtUsd(text) {
    const n = Number(text);
    if (!isNum(n)) return dash;
    return `$${n.toFixed(n >= 100 ? 0 : n >= 1 ? 2 : 4)}`;
  }
  // Budget use against the limit; `limit_usd` is null until budgets are configured.
  function budgetCell(spend, limit) {
    if (limit === null || limit === undefined) return el('span', { class: 'muted' }, 'no budget');
    const used = Number(spend) / Number(limit);
    return el('span', { class: used >= 1 ? 'bad' : '' }, `${fmtPct(used, 0)} of ${fmtUsd(limit)}`,
      bar(used, used >= 0.9));
  }
  function spendTable(head, rows) {
    return el('table', {}, el('thead', {}, el('tr', {}, ...head.map((h) => el('th', {}, h)))),
      el('tbody', {}, ...rows));
  }
  function renderSpenders(d) {
    const cards = d.periods.map((p) => {
      const keys = p.keys.map((k) => el('tr', { 'data-spender-key': k.key },
        el('td', {}, k.key === '-' ? 'no key' : k.name ? `${k.name} (${k.key})` : k.key),
        el('td', {}, k.team === null ? 'no team' : k.team),
        el('td', {}, fmtCount(k.requests)),
        el('td', { 'data-field': 'spend', title: `hosted $${k.hosted_usd}, GPU $${k.gpu_usd}` }, fmtUsd(k.spend_usd)),
        el('td', { 'data-field': 'budget' }, budgetCell(k.spend_usd, k.limit_usd))));
      const teams = p.teams.map((t) => el('tr', { 'data-spender-team': t.team },
        el('td', {}, t.team === '-' ? 'no team' : t.team), el('td', {}, fmtCount(t.keys)),
        el('td', {}, fmtCount(t.requests)),
        el('td', { 'data-field': 'spend', title: `hosted $${t.hosted_usd}, GPU $${t.gpu_usd}` }, fmtUsd(t.spend_usd)),
        el('td', { 'data-field': 'budget' }, budgetCell(t.spend_usd, t.limit_usd))));
      const title = p.period === 'today' ? 'Today' : 'This month';
      const more = (n, shown, what) => (n > shown ? ` (top ${shown} of ${n} ${what})` : '');
      return el('div', { class: 'card', 'data-period': p.period },
        el('h3', {}, title, el('span', { class: 'muted' },
          ` ${fmtUsd(p.total_usd)} in all since ${p.from.slice(0, 10)}`)),
        el('div', { class: 'muted' }, `keys${more(p.key_count, p.keys.length, 'keys')}`),
        keys.length
          ? spendTable(['key', 'team', 'requests', 'spend', 'budget'], keys)
          : el('p', { class: 'muted' }, 'no spend yet'),
        el('div', { class: 'muted' }, `teams${more(p.team_count, p.teams.length, 'teams')}`),
        teams.length
          ? spendTable(['team', 'keys', 'requests', 'spend', 'budget'], teams)
          : el('p', { class: 'muted' }, 'no spend yet'));
    });
    $('spenders-periods').replaceChildren(...cards);
  }
  async function pollSpenders() {
    clearTimeout(spendersTimer);
    if (!adminToken) return;
    const status = $('spenders-status');
    try {
      const signal = AbortSignal.timeout(FETCH_TIMEOUT_MS);
      const headers = { Authorization: `Bearer ${adminToken}` };
      const resp = await fetch('/admin/spenders', { cache: 'no-store', headers, signal });
      if (!resp.ok) {
        const body = await resp.json().catch(() => null);
        const why = body && body.error ? body.error.message : `HTTP ${resp.status}`;
        if (resp.status === 401 || resp.status === 404) adminToken = null; // asking again would not help
        throw new Error(why);
      }
      renderSpenders(await resp.json());
      setText(status, `updated ${new Date().toLocaleTimeString()}`, 'muted');
    } catch (e) {
      setText(status, `no spenders: ${e && e.message ? e.message : e}`, 'bad');
    }
    if (adminToken) spendersTimer = setTimeout(pollSpenders, SPENDERS_MS);
  }
  function showSpenders() {
    const input = $('admin-token');
    adminToken = input.value.trim() || null;
    input.value = '';
    setText($('spenders-status'), adminToken ? 'loading\u2026' : 'enter the admin token', 'muted');
    pollSpenders();
  }
  $('spenders-show').addEventListener('click', showSpenders);
  $('admin-token').addEventListener('keydown', (e) => { if (e.key === 'Enter') showSpenders(); });

  // A failed fetch shows on the status badge; a failure to draw is a bug and is left to
  // surface as a page error (the browser test fails on it).
  async function poll() {
    const status = $('status');
    let data = null;
    try {
      const signal = AbortSignal.timeout(FETCH_TIMEOUT_MS);
      const resp = await fetch('/dashboard/data', { cache: 'no-store', signal });
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      data = await resp.json();
    } catch (e) {
      setText(status, `no data: ${e && e.message ? e.message : e}`, 'status bad');
    }
    setTimeout(poll, POLL_MS);
    if (data) {
      render(data);
      setText(status, 'live', 'status ok');
    }
  }
  poll();
})();
