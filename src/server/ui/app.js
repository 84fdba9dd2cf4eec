// The web page of `primekv serve`: a chat over /v1/completions (streamed) and a view of what
// the session's compressed KV cache kept (GET /v1/sessions/{id}/cache). All text from the
// server or the user is written with textContent, never parsed as HTML. The API key lives in
// this closure only (never in localStorage or a cookie).
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const state = {
    key: '',        // the API key, in memory only
    presses: [],    // GET /v1/presses
    lanes: [],      // one conversation per press shown
    busy: false,
  };

  // ---- API ----------------------------------------------------------------------------------

  function headers(json) {
    const h = {};
    if (state.key) h.Authorization = 'Bearer ' + state.key;
    if (json) h['Content-Type'] = 'application/json';
    return h;
  }

  async function errorText(res) {
    try {
      const j = await res.json();
      return (j.error && j.error.message) || res.statusText;
    } catch (e) {
      return res.statusText;
    }
  }

  async function getJson(path) {
    const res = await fetch(path, { headers: headers(false), cache: 'no-store' });
    if (!res.ok) throw new Error(res.status + ': ' + await errorText(res));
    return res.json();
  }

  // Server-sent events of a streamed completion: onText(delta) for each piece of the answer;
  // resolves with the session, the usage and the timings of the turn.
  async function streamCompletion(body, onText) {
    const res = await fetch('/v1/completions', {
      method: 'POST', headers: headers(true), body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(res.status + ': ' + await errorText(res));
    const out = { session: res.headers.get('X-PrimeKV-Session'), usage: null, timings: null };
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        handleEvent(event, out, onText);
      }
    }
    return out;
  }

  function handleEvent(event, out, onText) {
    if (!event.startsWith('data: ')) return;
    const data = event.slice(6);
    if (data === '[DONE]') return;
    const j = JSON.parse(data);
    if (j.error) throw new Error(j.error.message);
    if (j.session) out.session = j.session;
    if (j.usage) out.usage = j.usage;
    if (j.primekv && j.primekv.timings) out.timings = j.primekv.timings;
    const choice = j.choices && j.choices[0];
    if (choice && choice.text) onText(choice.text);
  }

  // ---- Settings -----------------------------------------------------------------------------

  function setStatus(id, text, bad) {
    const el = $(id);
    el.textContent = text;
    el.classList.toggle('bad', !!bad);
  }

  async function loadPresses() {
    let reg;
    try {
      reg = await getJson('/v1/presses');
    } catch (e) {
      setStatus('key-status', state.key ? 'key refused (' + e.message + ')' :
        'this server needs an API key', true);
      return false;
    }
    state.presses = reg.data.filter((p) => p.served).map((p) => p.name);
    // The default as the server resolved it (profile=auto names the profile's file) is offered
    // as it is, so the page shows which profile a session uses.
    if (!state.presses.includes(reg.default.press)) state.presses.unshift(reg.default.press);
    fillSelect($('press-a'), state.presses, reg.default.press);
    fillSelect($('press-b'), state.presses, state.presses.includes('keydiff') ? 'keydiff' :
      reg.default.press);
    $('ratio-a').value = reg.default.ratio;
    fillSelect($('mode'), reg.modes, reg.default.mode);
    $('mode').disabled = reg.modes.length < 2;
    $('mode-note').textContent = reg.modes.length < 2 ? 'set by the server (--mode)' : '';
    setStatus('key-status', state.key ? 'key accepted' : 'no key needed');
    return true;
  }

  function fillSelect(select, names, chosen) {
    select.replaceChildren();
    for (const name of names) {
      const o = document.createElement('option');
      o.value = name;
      o.textContent = name;
      o.selected = name === chosen;
      select.appendChild(o);
    }
  }

  function laneSettings(which) {
    return { press: $('press-' + which).value, ratio: Number($('ratio-' + which).value) };
  }

  // ---- Lanes: one conversation each ---------------------------------------------------------

  function newLane(which) {
    const el = $('lane-template').content.firstElementChild.cloneNode(true);
    el.id = 'lane-' + which;
    const lane = { which, el, session: null, text: '', doc: null, press: '', ratio: 0,
      cache: null, selected: -1 };
    const view = el.querySelector('.doc-view');
    view.addEventListener('click', (ev) => {
      const i = ev.target.dataset && ev.target.dataset.i;
      if (i !== undefined) selectToken(lane, Number(i));
    });
    view.addEventListener('keydown', (ev) => tokenKeys(lane, ev));
    return lane;
  }

  function resetLanes() {
    const compare = $('compare').checked;
    $('lane-b-settings').hidden = !compare;
    state.lanes = compare ? [newLane('a'), newLane('b')] : [newLane('a')];
    const box = $('lanes');
    box.replaceChildren(...state.lanes.map((l) => l.el));
    box.classList.toggle('two', compare);
    for (const lane of state.lanes) titleLane(lane);
  }

  function titleLane(lane) {
    const s = laneSettings(lane.which);
    lane.el.querySelector('.lane-title').textContent =
      s.press + ' at ' + s.ratio + (lane.session ? ' (session ' + lane.session + ')' : '');
  }

  // A lane whose press, ratio or document changed starts a new session.
  function prepareLane(lane, doc) {
    const s = laneSettings(lane.which);
    if (lane.session && (s.press !== lane.press || s.ratio !== lane.ratio || doc !== lane.doc)) {
      lane.session = null;
      lane.text = '';
      lane.el.querySelector('.messages').replaceChildren();
    }
    lane.press = s.press;
    lane.ratio = s.ratio;
    lane.doc = doc;
  }

  function addMessage(lane, role, text) {
    const li = document.createElement('li');
    li.className = role;
    const body = document.createElement('div');
    body.className = 'text';
    body.textContent = text;
    li.appendChild(body);
    lane.el.querySelector('.messages').appendChild(li);
    return li;
  }

  function showFigures(li, out) {
    const p = document.createElement('p');
    p.className = 'figures';
    const t = out.timings || {};
    const cached = out.usage ? out.usage.prompt_tokens_details.cached_tokens : '?';
    p.textContent = 'prefill ' + ms(t.prefill_ms) + ' · compression ' + ms(t.compress_ms) +
      ' · decode ' + ms(t.decode_ms) + ' · cached_tokens ' + cached;
    li.appendChild(p);
  }

  function ms(v) {
    return v === undefined ? '?' : v.toFixed(1) + ' ms';
  }

  // One question on one lane: the document first (prefilled and compressed on its own, as the
  // evaluation's protocol does), then the question continuing that session.
  async function askLane(lane, question, prefix, maxTokens) {
    const base = { temperature: 0, primekv: { press: lane.press, ratio: lane.ratio } };
    if (!lane.session && lane.doc) {
      const res = await fetch('/v1/completions', {
        method: 'POST', headers: headers(true),
        body: JSON.stringify({ ...base, prompt: lane.doc, max_tokens: 0 }),
      });
      if (!res.ok) throw new Error(res.status + ': ' + await errorText(res));
      lane.session = (await res.json()).session;
      lane.text = lane.doc;
    }
    addMessage(lane, 'user', question);
    const li = addMessage(lane, 'assistant', '');
    const answerEl = li.querySelector('.text');
    const prompt = (lane.text ? lane.text + '\n' : '') + question + '\n' + prefix;
    const body = { ...base, prompt, max_tokens: maxTokens, stream: true,
      stream_options: { include_usage: true } };
    if (lane.session) body.session = lane.session;
    let answer = '';
    const out = await streamCompletion(body, (delta) => {
      answer += delta;
      answerEl.textContent = prefix + answer;
    });
    lane.session = out.session;
    lane.text = prompt + answer;
    li.dataset.answer = prefix + answer;
    showFigures(li, out);
    titleLane(lane);
    await refreshCache(lane);
  }

  async function ask() {
    const question = $('question').value.trim();
    if (!question || state.busy) return;
    state.busy = true;
    $('send').disabled = true;
    setStatus('ask-status', 'answering…');
    const doc = $('doc').value;
    const prefix = $('prefix').value;
    const maxTokens = Number($('max-tokens').value) || 24;
    try {
      for (const lane of state.lanes) prepareLane(lane, doc);
      // One after the other: each lane's figures are then its own, not a shared slot's.
      for (const lane of state.lanes) await askLane(lane, question, prefix, maxTokens);
      $('question').value = '';
      setStatus('ask-status', 'done');
    } catch (e) {
      setStatus('ask-status', e.message, true);
    } finally {
      state.busy = false;
      $('send').disabled = false;
      $('question').focus();
    }
  }

  // ---- The cache view -----------------------------------------------------------------------

  // The endpoint's lists of small numbers: base64url digits of 5 bits, lowest first; a digit
  // of 32 or more says another follows.
  const DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const DIGIT = new Map([...DIGITS].map((c, i) => [c, i]));

  function varints(s) {
    const out = [];
    let n = 0;
    let scale = 1;
    for (const ch of s) {
      const d = DIGIT.get(ch);
      if (d >= 32) {
        n += (d - 32) * scale;
        scale *= 32;
      } else {
        out.push(n + d * scale);
        n = 0;
        scale = 1;
      }
    }
    return out;
  }

  function tokenPieces(cache) {
    const pieces = [];
    let at = 0;
    for (const len of varints(cache.token_lengths)) {
      pieces.push(cache.text.slice(at, at + len));
      at += len;
    }
    return pieces;
  }

  // Run lengths (removed, kept, removed, kept, ...) to a list of kept [start, end) ranges.
  function keptRanges(runs) {
    const ranges = [];
    let at = 0;
    for (let i = 0; i + 1 < runs.length; i += 2) {
      at += runs[i];
      ranges.push([at, at + runs[i + 1]]);
      at += runs[i + 1];
    }
    return ranges;
  }

  function keptCounts(cache) {
    const counts = new Uint16Array(cache.n_tokens);
    const perLayer = new Array(cache.n_layers).fill(0);
    cache.pieces = tokenPieces(cache);
    cache.ranges = cache.kept.map((runs) => keptRanges(varints(runs)));
    cache.ranges.forEach((ranges, head) => {
      for (const [a, b] of ranges) {
        for (let p = a; p < b; ++p) counts[p]++;
        perLayer[Math.floor(head / cache.n_heads)] += b - a;
      }
    });
    cache.counts = counts;
    cache.perLayer = perLayer;
  }

  async function refreshCache(lane) {
    lane.cache = await getJson('/v1/sessions/' + encodeURIComponent(lane.session) + '/cache');
    keptCounts(lane.cache);
    lane.selected = -1;
    lane.el.querySelector('.cache').hidden = false;
    renderTokens(lane);
    renderPerLayer(lane);
    renderGrid(lane);
    renderBytes(lane);
  }

  function renderTokens(lane) {
    const c = lane.cache;
    const heads = c.n_layers * c.n_heads;
    const frag = document.createDocumentFragment();
    c.pieces.forEach((piece, i) => {
      const span = document.createElement('span');
      span.textContent = piece;
      span.dataset.i = i;
      span.className = 'k' + Math.round((10 * c.counts[i]) / heads);
      frag.appendChild(span);
    });
    lane.el.querySelector('.doc-view').replaceChildren(frag);
    lane.el.querySelector('.token-map').replaceChildren();
  }

  function cell(tag, text, cls) {
    const el = document.createElement(tag);
    el.textContent = text;
    if (cls) el.className = cls;
    return el;
  }

  function renderPerLayer(lane) {
    const c = lane.cache;
    const body = lane.el.querySelector('.per-layer tbody');
    body.replaceChildren();
    c.perLayer.forEach((kept, l) => {
      const tr = document.createElement('tr');
      tr.dataset.layer = l;
      const fraction = kept / (c.n_heads * c.n_tokens);
      tr.dataset.kept = kept;
      tr.dataset.fraction = fraction;
      tr.append(cell('td', String(l)), cell('td', kept + ' of ' + c.n_heads * c.n_tokens),
        cell('td', (100 * fraction).toFixed(1) + '%'));
      body.appendChild(tr);
    });
  }

  function renderGrid(lane) {
    const c = lane.cache;
    const table = lane.el.querySelector('.grid');
    const head = document.createElement('tr');
    head.appendChild(cell('th', 'layer \\ head'));
    for (let h = 0; h < c.n_heads; ++h) head.appendChild(cell('th', 'head ' + h));
    const rows = [head];
    const last = c.last_compression;
    for (let l = 0; l < c.n_layers; ++l) {
      const tr = document.createElement('tr');
      tr.appendChild(cell('th', 'layer ' + l));
      for (let h = 0; h < c.n_heads; ++h) {
        const i = l * c.n_heads + h;
        const now = c.ranges[i].reduce((s, [a, b]) => s + b - a, 0);
        const text = last ? last.after[i] + ' of ' + last.before[i] : String(now);
        const share = last && last.before[i] ? last.after[i] / last.before[i] : 1;
        tr.appendChild(cell('td', text, 'k' + Math.round(10 * share)));
      }
      rows.push(tr);
    }
    table.replaceChildren(...rows);
  }

  function kib(bytes) {
    return (bytes / 1024).toFixed(1) + ' KiB';
  }

  function renderBytes(lane) {
    const c = lane.cache;
    const share = c.bytes.full ? c.bytes.kept / c.bytes.full : 1;
    const box = lane.el.querySelector('.bytes');
    const bar = cell('div', '', 'bar');
    const fill = cell('div', '', 'fill w' + Math.round(20 * share));
    bar.appendChild(fill);
    box.replaceChildren(cell('p', 'full cache ' + kib(c.bytes.full) + ', compressed ' +
      kib(c.bytes.kept) + ' (' + (100 * share).toFixed(1) + '%)'), bar);
    const body = lane.el.querySelector('.turns tbody');
    body.replaceChildren(...c.turns.map((t) => {
      const tr = document.createElement('tr');
      for (const v of [t.turn, t.tokens, kib(t.bytes_full), kib(t.bytes_kept),
        t.prefill_ms.toFixed(1), t.compress_ms.toFixed(1), t.decode_ms.toFixed(1),
        t.cached_tokens]) tr.appendChild(cell('td', String(v)));
      return tr;
    }));
  }

  function selectToken(lane, i) {
    const c = lane.cache;
    if (!c || i < 0 || i >= c.n_tokens) return;
    const view = lane.el.querySelector('.doc-view');
    if (lane.selected >= 0) view.children[lane.selected].classList.remove('sel');
    lane.selected = i;
    const span = view.children[i];
    span.classList.add('sel');
    span.scrollIntoView({ block: 'nearest' });
    renderTokenMap(lane, i);
  }

  function renderTokenMap(lane, i) {
    const c = lane.cache;
    const box = lane.el.querySelector('.token-map');
    const kept = (head) => c.ranges[head].some(([a, b]) => i >= a && i < b);
    const table = document.createElement('table');
    const head = document.createElement('tr');
    head.appendChild(cell('th', 'layer'));
    for (let h = 0; h < c.n_heads; ++h) head.appendChild(cell('th', 'head ' + h));
    table.appendChild(head);
    for (let l = 0; l < c.n_layers; ++l) {
      const tr = document.createElement('tr');
      tr.appendChild(cell('th', String(l)));
      for (let h = 0; h < c.n_heads; ++h) {
        const k = kept(l * c.n_heads + h);
        tr.appendChild(cell('td', k ? 'kept' : 'removed', k ? 'k10' : 'k0'));
      }
      table.appendChild(tr);
    }
    // The token's text in a <bdi>: a direction override in the document (U+202E) stays inside
    // it instead of reversing the label's own words.
    const label = document.createElement('p');
    label.append('token ' + i + ' ', cell('bdi', JSON.stringify(c.pieces[i])),
      ': kept by ' + c.counts[i] + ' of ' + c.n_layers * c.n_heads + ' heads');
    box.replaceChildren(label, table);
  }

  function tokenKeys(lane, ev) {
    if (!lane.cache) return;
    const step = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: 20, ArrowUp: -20 }[ev.key];
    if (step) {
      ev.preventDefault();
      const from = lane.selected < 0 ? 0 : lane.selected + step;
      selectToken(lane, Math.max(0, Math.min(lane.cache.n_tokens - 1, from)));
    } else if (ev.key === 'Home' || ev.key === 'End') {
      ev.preventDefault();
      selectToken(lane, ev.key === 'Home' ? 0 : lane.cache.n_tokens - 1);
    }
  }

  // ---- Wiring -------------------------------------------------------------------------------

  function init() {
    $('key-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      state.key = $('api-key').value;
      $('api-key').value = '';
      if (await loadPresses()) $('question').focus();
    });
    $('ask-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      ask();
    });
    $('question').addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        ask();
      }
    });
    $('doc-file').addEventListener('change', async () => {
      const file = $('doc-file').files[0];
      if (file) $('doc').value = await file.text();
    });
    $('compare').addEventListener('change', resetLanes);
    $('new-chat').addEventListener('click', resetLanes);
    for (const id of ['press-a', 'ratio-a', 'press-b', 'ratio-b']) {
      $(id).addEventListener('change', () => state.lanes.forEach(titleLane));
    }
    resetLanes();
    loadPresses().then((ok) => (ok ? $('question') : $('api-key')).focus());
  }

  init();
})();
