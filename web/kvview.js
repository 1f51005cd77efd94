// kvlab's live view (book: live-view.md).
//
// The engine publishes a *snapshot* after every iteration: every block of the pool with
// its owners, every request with its text, the batch the pass ran (src/engine/snapshot.rs).
// A snapshot is whole, not a diff, so this page never has to remember how it got here: it
// draws whichever snapshot it holds. Two sources feed it the same type:
//   live:   GET /v1/engine/events, server-sent events named `snapshot`;
//   replay: a recording (a Chrome trace written by `kvlab serve --record`), loaded with
//           ?replay=URL, the file chooser, or drag-and-drop.
//   embed:  ?replay=URL&embed=1, the compact layout of the book's iframes (a replay
//           only: no key field, no file chooser, a link to the full page).
// Plain JavaScript, no framework and no build step: the server embeds this file as is.
'use strict';

(function () {
  /** The snapshot version this page understands (SNAPSHOT_VERSION in snapshot.rs). */
  const VERSION = 1;
  /** Iterations the charts look back over. */
  const HISTORY = 300;
  /** Longest pause between two frames of a replay: idle gaps in a recording would stall it. */
  const MAX_GAP_MS = 500;
  const KEY_STORAGE = 'kvlab-api-key';

  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  /** Inside a chapter's iframe (`embed=1`): the compact layout of kvview.css. */
  const embedded = params.get('embed') === '1';

  // What the page shows, and what a test reads (`window.kvview`).
  const state = {
    mode: 'live', // 'live' | 'replay'
    /** Recent snapshots (live), or all of a recording's (replay). */
    snaps: [],
    /** The one shown: an index into `snaps`. */
    index: -1,
    playing: false,
    timer: null,
  };
  const view = { current: null, count: 0, mode: 'live', index: -1 };
  window.kvview = view;

  // ---------------------------------------------------------------- colours and units

  /** A stable colour per request: ids step around the hue circle by the golden angle,
   *  so consecutive ids (which arrive together) get colours far apart. */
  function hue(id) {
    return (id * 137.508) % 360;
  }
  function colour(id, light = 52) {
    return `hsl(${hue(id).toFixed(1)} 62% ${light}%)`;
  }

  function bytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let u = 0;
    while (n >= 1024 && u < units.length - 1) {
      n /= 1024;
      u += 1;
    }
    return `${u === 0 ? n : n.toFixed(n < 10 ? 2 : 1)} ${units[u]}`;
  }

  function text(id, value) {
    const el = $(id);
    const s = String(value);
    if (el.textContent !== s) el.textContent = s;
  }

  function showMessage(msg, kind = 'info') {
    const el = $('message');
    el.hidden = !msg;
    el.textContent = msg || '';
    el.className = `message ${kind}`;
  }

  // ---------------------------------------------------------------- drawing one snapshot

  /** Draws `snap`, with `history` (older snapshots, oldest first, `snap` last) for the
   *  charts and the event log. */
  function render(snap, history) {
    if (snap.version !== VERSION) {
      showMessage(`This snapshot is version ${snap.version}; this page reads version ${VERSION}. ` +
        'Use the page served by the same kvlab that recorded it.', 'error');
      return;
    }
    text('iteration', snap.iteration);
    renderSummary(snap.pool);
    renderGrid(snap.pool);
    renderBatch(snap);
    renderRequests(snap.requests);
    renderEvents(history);
    renderCharts(history);
    // Set last, in the same task as the DOM: whoever reads `current` sees it drawn.
    view.current = snap;
  }

  function renderSummary(pool) {
    text('pool-used', pool.used);
    text('pool-free', pool.free);
    text('pool-parked', pool.parked);
    text('pool-shared', pool.shared);
    text('pool-total', pool.blocks.length);
    text('kv-bytes', bytes(pool.used * pool.block_bytes));
    text('pool-kv', `${pool.block_size} tokens a block · ${bytes(pool.block_bytes)} · kv ${pool.kv}`);
  }

  /** A block's class: parked (no owner, kept by the prefix cache), used (in a block
   *  table), or free. */
  function blockClass(block) {
    if (block.parked) return 'parked';
    if ((block.refs || 0) > 0 || (block.owners || []).length > 0) return 'used';
    return 'free';
  }

  /** One cell per block. The cells are made once per pool size and then only updated:
   *  a pool has thousands of blocks and a snapshot arrives every iteration. */
  function renderGrid(pool) {
    const grid = $('grid');
    const n = pool.blocks.length;
    if (grid.children.length !== n) {
      const cells = [];
      for (let b = 0; b < n; b++) {
        const cell = document.createElement('div');
        cell.dataset.block = String(b);
        cells.push(cell);
      }
      grid.replaceChildren(...cells);
      // Cells as large as the pool allows: a few hundred blocks fit big, thousands small.
      grid.classList.toggle('roomy', n <= 256);
      grid.classList.toggle('dense', n > 1024);
    }
    for (let b = 0; b < n; b++) updateCell(grid.children[b], b, pool.blocks[b]);
  }

  function updateCell(cell, b, block) {
    const owners = block.owners || [];
    const refs = block.refs || 0;
    const cls = blockClass(block);
    const className = `cell ${cls}${refs > 1 ? ' shared' : ''}${block.named ? ' named' : ''}`;
    const ownersText = owners.join(',');
    // Skip cells that did not change: most of the pool, most of the time.
    if (cell.className === className && cell.dataset.owners === ownersText &&
        cell.dataset.refs === String(refs)) return;
    cell.className = className;
    cell.dataset.owners = ownersText;
    cell.dataset.refs = String(refs);
    // A shared block is striped with its owners' colours, so the prefix shows up as the
    // cells that belong to several requests at once.
    if (owners.length === 1) cell.style.background = colour(owners[0]);
    else if (owners.length > 1) cell.style.background = stripes(owners);
    else cell.style.background = '';
    cell.textContent = refs > 1 ? String(refs) : '';
    cell.title = `block ${b}` +
      (owners.length ? ` · owners ${owners.join(', ')}` : '') +
      ` · refs ${refs}` +
      (block.parked ? ' · parked in the prefix cache' : block.named ? ' · named (prefix cache)' : '') +
      (cls === 'free' ? ' · free' : '');
  }

  function stripes(owners) {
    const step = 100 / owners.length;
    const parts = owners.map((id, i) =>
      `${colour(id)} ${(i * step).toFixed(1)}% ${((i + 1) * step).toFixed(1)}%`);
    return `linear-gradient(135deg, ${parts.join(', ')})`;
  }

  /** The iteration's token budget as a bar: each request's rows a segment in its colour,
   *  prefill chunks striped, drafts marked at the segment's end. */
  function renderBatch(snap) {
    const bar = $('batch-bar');
    const budget = Math.max(1, snap.budget.max_batch_tokens);
    const rows = snap.batch.reduce((sum, b) => sum + b.rows, 0);
    const segments = snap.batch.map((b) => {
      const seg = document.createElement('div');
      seg.className = `seg ${b.kind}`;
      seg.dataset.request = String(b.id);
      seg.style.width = `${(100 * b.rows) / Math.max(budget, rows)}%`;
      seg.style.setProperty('--c', colour(b.id));
      seg.title = `request ${b.id}: ${b.kind}, ${b.rows} row${b.rows === 1 ? '' : 's'} from position ${b.start_pos}` +
        (b.drafts ? `, ${b.drafts} of them drafts` : '');
      if (b.drafts > 0) {
        const drafts = document.createElement('div');
        drafts.className = 'drafts';
        drafts.style.width = `${(100 * b.drafts) / b.rows}%`;
        seg.append(drafts);
      }
      return seg;
    });
    bar.replaceChildren(...segments);
    text('batch-rows', `${rows} / ${snap.budget.max_batch_tokens} rows`);
    const decode = snap.batch.filter((b) => b.kind === 'decode').length;
    const prefill = snap.batch.length - decode;
    text('batch-detail', `${decode} decoding, ${prefill} prefilling · ` +
      `${snap.batch.length} / ${snap.budget.max_batch_seqs} sequences · ` +
      `${(snap.seconds * 1e3).toFixed(1)} ms`);
  }

  /** Running then waiting requests, one row each, keyed by id so a row stays put while
   *  its text streams in. */
  function renderRequests(requests) {
    const list = $('requests');
    const old = new Map();
    for (const el of list.children) old.set(el.dataset.request, el);
    const rows = requests.map((r) => {
      const el = old.get(String(r.id)) || makeRequestRow(r.id);
      updateRequestRow(el, r);
      return el;
    });
    // replaceChildren moves kept rows rather than rebuilding them.
    list.replaceChildren(...rows);
    const running = requests.filter((r) => r.state === 'running').length;
    text('requests-count', `${running} running, ${requests.length - running} waiting`);
  }

  function makeRequestRow(id) {
    const el = document.createElement('div');
    el.className = 'request';
    el.dataset.request = String(id);
    el.innerHTML =
      '<div class="head"><i class="swatch"></i><b class="rid"></b> <span class="state"></span>' +
      '<span class="stats"></span></div>' +
      '<div class="bars"><div class="bar prompt"><div></div></div><div class="bar gen"><div></div></div></div>' +
      '<div class="text"><span class="tail"></span><span class="out"></span></div>';
    el.querySelector('.swatch').style.background = colour(id);
    el.querySelector('.rid').textContent = `#${id}`;
    return el;
  }

  function updateRequestRow(el, r) {
    el.dataset.state = r.state;
    el.className = `request ${r.state}`;
    el.querySelector('.state').textContent = r.state;
    // `computed` counts generated positions too; the prompt bar shows the prompt's share.
    const prompt = Math.min(r.computed, r.prompt_tokens);
    el.querySelector('.stats').textContent =
      `prompt ${prompt}/${r.prompt_tokens} · generated ${r.generated}/${r.max_tokens} · ` +
      `${r.blocks} block${r.blocks === 1 ? '' : 's'} · ${r.cached_prompt_tokens} cached`;
    el.querySelector('.bar.prompt > div').style.width = `${pct(prompt, r.prompt_tokens)}%`;
    el.querySelector('.bar.gen > div').style.width = `${pct(r.generated, r.max_tokens)}%`;
    el.querySelector('.tail').textContent = r.prompt_tail;
    el.querySelector('.out').textContent = r.text;
  }

  function pct(a, b) {
    return b > 0 ? Math.min(100, (100 * a) / b) : 0;
  }

  /** This iteration's departures, then a short log of the recent ones: a request that
   *  leaves is gone from the next snapshot, so the log is the only trace of it. */
  function renderEvents(history) {
    const kinds = ['finished', 'preempted', 'cancelled', 'failed'];
    const items = [];
    for (let i = history.length - 1; i >= 0 && items.length < 12; i--) {
      const s = history[i];
      for (const kind of kinds) {
        for (const id of s[kind] || []) {
          items.push({ kind, id, iteration: s.iteration, now: i === history.length - 1 });
        }
      }
    }
    const els = items.slice(0, 12).map((e) => {
      const el = document.createElement('span');
      el.className = `event ${e.kind}${e.now ? ' now' : ''}`;
      el.dataset.event = e.kind;
      el.dataset.request = String(e.id);
      el.innerHTML = '<i class="swatch"></i>';
      el.firstChild.style.background = colour(e.id);
      el.append(`#${e.id} ${e.kind} @${e.iteration}`);
      return el;
    });
    $('events').replaceChildren(...els);
  }

  // ---------------------------------------------------------------- charts

  function renderCharts(history) {
    const its = history.map((s) => s.iteration);
    const kv = history.map((s) => s.pool.used * s.pool.block_bytes);
    lineChart($('chart-kv'), its, kv, { format: bytes, colour: 'hsl(210 60% 45%)' });
    const ttft = [];
    const itl = [];
    for (const s of history) {
      for (const ms of s.ttft_ms || []) ttft.push([s.iteration, ms]);
      const gaps = s.inter_token_ms || [];
      if (gaps.length) itl.push([s.iteration, gaps.reduce((a, b) => a + b, 0) / gaps.length]);
    }
    const range = [its[0] ?? 0, its[its.length - 1] ?? 0];
    pointChart($('chart-ttft'), range, ttft, { colour: 'hsl(20 70% 45%)', dots: true });
    pointChart($('chart-itl'), range, itl, { colour: 'hsl(150 50% 35%)', dots: false });
  }

  function lineChart(canvas, xs, ys, opts) {
    pointChart(canvas, [xs[0] ?? 0, xs[xs.length - 1] ?? 0], xs.map((x, i) => [x, ys[i]]), opts);
  }

  /** A minimal chart: points [x, y] over an x range, y from 0 to the largest value
   *  (labelled), joined by a line unless `dots`. Canvas, so 300 points cost nothing. */
  function pointChart(canvas, [x0, x1], points, { colour: c, dots = false, format = (v) => v.toFixed(1) }) {
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || canvas.width;
    const h = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(w * ratio)) canvas.width = Math.round(w * ratio);
    if (canvas.height !== Math.round(h * ratio)) canvas.height = Math.round(h * ratio);
    const g = canvas.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, h);
    const top = 14;
    const ymax = Math.max(0, ...points.map((p) => p[1]));
    g.fillStyle = '#667';
    g.font = '11px system-ui, sans-serif';
    g.fillText(points.length ? `max ${format(ymax)}` : 'no data yet', 4, 11);
    if (!points.length) return;
    const sx = (x) => (x1 > x0 ? ((x - x0) / (x1 - x0)) * (w - 8) + 4 : w - 4);
    const sy = (y) => h - 3 - (ymax > 0 ? (y / ymax) * (h - top - 4) : 0);
    g.strokeStyle = '#dde';
    g.beginPath();
    g.moveTo(0, h - 2.5);
    g.lineTo(w, h - 2.5);
    g.stroke();
    g.strokeStyle = c;
    g.fillStyle = c;
    g.lineWidth = 1.5;
    if (dots) {
      for (const [x, y] of points) {
        g.beginPath();
        g.arc(sx(x), sy(y), 2.5, 0, 2 * Math.PI);
        g.fill();
      }
    } else {
      g.beginPath();
      points.forEach(([x, y], i) => (i ? g.lineTo(sx(x), sy(y)) : g.moveTo(sx(x), sy(y))));
      g.stroke();
    }
  }

  // ---------------------------------------------------------------- showing state.snaps[index]

  /** Live snapshots can come faster than the screen refreshes: draw at most once a frame,
   *  always the newest. */
  let drawQueued = false;
  function draw() {
    if (drawQueued) return;
    drawQueued = true;
    requestAnimationFrame(() => {
      drawQueued = false;
      drawNow();
    });
  }

  function drawNow() {
    const i = state.index;
    if (i < 0 || i >= state.snaps.length) return;
    render(state.snaps[i], state.snaps.slice(Math.max(0, i - HISTORY + 1), i + 1));
    view.index = i;
    if (state.mode === 'replay') {
      $('slider').value = String(i);
      text('replay-pos', i + 1);
    }
  }

  // ---------------------------------------------------------------- live: the event stream

  /** Server-sent events read with fetch, not EventSource: EventSource cannot send the
   *  `Authorization` header a server with an API key asks for. */
  let liveAbort = null;
  let backoffMs = 500;

  async function startLive() {
    if (location.protocol === 'file:') {
      showMessage('Opened as a file: no engine to watch. Open a recording instead.');
      return;
    }
    // This attempt's own controller: a newer attempt replaces `liveAbort`.
    const abort = new AbortController();
    liveAbort = abort;
    const key = sessionStorage.getItem(KEY_STORAGE) || '';
    const headers = { Accept: 'text/event-stream' };
    if (key) headers.Authorization = `Bearer ${key}`;
    let retry = true;
    try {
      // From the origin's root: the page may be at / or elsewhere on the same server.
      const response = await fetch('/v1/engine/events', { headers, signal: abort.signal, cache: 'no-store' });
      if (response.status === 401) {
        showMessage('This server needs its API key: type it in the API key field above.', 'error');
        retry = false; // until the key changes (see the key field's listener)
        return;
      }
      if (response.status === 404) {
        showMessage('No engine here (GET /v1/engine/events: 404). Open a recording to replay it.');
        retry = false;
        return;
      }
      if (!response.ok || !response.body) throw new Error(`GET /v1/engine/events: ${response.status}`);
      text('mode', 'live');
      await readEvents(response.body, (name, data) => {
        if (name === 'snapshot') onLiveSnapshot(JSON.parse(data));
      });
      showMessage('The event stream ended (server stopping?); reconnecting…');
    } catch (e) {
      if (state.mode !== 'live' || (e && e.name === 'AbortError')) return;
      showMessage(`Lost the engine (${e.message}); reconnecting…`);
    } finally {
      if (retry && state.mode === 'live' && !abort.signal.aborted) {
        text('mode', 'live · reconnecting');
        const wait = backoffMs;
        backoffMs = Math.min(backoffMs * 2, 8000);
        setTimeout(() => state.mode === 'live' && liveAbort === abort && startLive(), wait);
      }
    }
  }

  function stopLive() {
    if (liveAbort) liveAbort.abort();
  }

  /** The SSE wire format: lines `field: value`, an event ends at a blank line; `data`
   *  lines join with newlines; lines starting with `:` are comments (keep-alives). */
  async function readEvents(body, onEvent) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    let name = 'message';
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let nl;
      while ((nl = buffer.search(/\r\n|\n|\r/)) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + (buffer.startsWith('\r\n', nl) ? 2 : 1));
        if (line === '') {
          if (data.length) onEvent(name, data.join('\n'));
          name = 'message';
          data = [];
        } else if (!line.startsWith(':')) {
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          let val = colon < 0 ? '' : line.slice(colon + 1);
          if (val.startsWith(' ')) val = val.slice(1);
          if (field === 'event') name = val;
          else if (field === 'data') data.push(val);
        }
      }
    }
  }

  function onLiveSnapshot(snap) {
    if (state.mode !== 'live') return;
    if (snap.version !== VERSION) {
      showMessage(`The server sends snapshots of version ${snap.version}; this page reads version ${VERSION}.`, 'error');
      return;
    }
    backoffMs = 500;
    if (view.count === 0 || $('message').classList.contains('info')) showMessage('');
    view.count += 1;
    state.snaps.push(snap);
    if (state.snaps.length > HISTORY) state.snaps.splice(0, state.snaps.length - HISTORY);
    state.index = state.snaps.length - 1;
    draw();
  }

  // ---------------------------------------------------------------- replay: a recording

  /** The snapshots of a Chrome trace: the `args.snapshot` of its `iteration` slices. The
   *  format lets the closing `]` be missing (a recording cut short), and a writer cut off
   *  mid-line leaves a trailing comma: both are repaired before parsing. */
  function parseRecording(raw) {
    let t = raw.trim().replace(/,\s*$/, '');
    if (!t.endsWith(']')) t += ']';
    let events;
    try {
      events = JSON.parse(t);
    } catch (e) {
      throw new Error(`not a Chrome trace (a JSON array of events): ${e.message}`);
    }
    if (!Array.isArray(events)) throw new Error('not a Chrome trace (a JSON array of events)');
    const snaps = events
      .filter((e) => e && e.name === 'iteration' && e.args && e.args.snapshot)
      .map((e) => e.args.snapshot);
    const other = snaps.find((s) => s.version !== VERSION);
    if (other) {
      throw new Error(`the recording's snapshots are version ${other.version}; this page reads version ${VERSION}: record it again`);
    }
    if (!snaps.length) throw new Error('the recording holds no iteration (no "iteration" event with a snapshot)');
    return snaps;
  }

  function startReplay(raw, source) {
    let snaps;
    try {
      snaps = parseRecording(raw);
    } catch (e) {
      showMessage(`Cannot replay ${source}: ${e.message}`, 'error');
      return;
    }
    stopLive();
    pause();
    state.mode = 'replay';
    view.mode = 'replay';
    state.snaps = snaps;
    view.count = snaps.length;
    $('replay-controls').hidden = false;
    $('slider').max = String(snaps.length - 1);
    text('replay-count', snaps.length);
    // An iframe is narrow: the file's name, not its path.
    text('mode', `replay · ${embedded ? source.split('/').pop() : source}`);
    showMessage('');
    seek(0);
  }

  function seek(i) {
    state.index = Math.max(0, Math.min(state.snaps.length - 1, i));
    drawNow(); // at once: a stepping learner (or test) expects the frame it asked for
  }

  function play() {
    if (state.index >= state.snaps.length - 1) seek(0);
    state.playing = true;
    $('play').textContent = 'Pause';
    scheduleNext();
  }

  function pause() {
    state.playing = false;
    clearTimeout(state.timer);
    $('play').textContent = 'Play';
  }

  /** The next frame after the recorded gap between the two iterations (capped, so an
   *  idle minute does not stall the replay), divided by the speed. */
  function scheduleNext() {
    clearTimeout(state.timer);
    if (!state.playing) return;
    const i = state.index;
    if (i >= state.snaps.length - 1) {
      pause();
      return;
    }
    const gapMs = Math.min(MAX_GAP_MS, Math.max(0, (state.snaps[i + 1].t_us - state.snaps[i].t_us) / 1000));
    const speed = Number($('speed').value) || 1;
    state.timer = setTimeout(() => {
      seek(i + 1);
      scheduleNext();
    }, gapMs / speed);
  }

  async function replayUrl(url) {
    try {
      const response = await fetch(url);
      if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
      startReplay(await response.text(), url);
    } catch (e) {
      showMessage(`Cannot fetch the recording ${url}: ${e.message}`, 'error');
    }
  }

  function replayFile(file) {
    if (!file) return;
    file.text().then((raw) => startReplay(raw, file.name),
      (e) => showMessage(`Cannot read ${file.name}: ${e.message}`, 'error'));
  }

  // ---------------------------------------------------------------- wiring

  function wire() {
    const keyField = $('api-key');
    keyField.value = sessionStorage.getItem(KEY_STORAGE) || '';
    // A new key: connect again with it (Enter submits the field's form; leaving it changes it).
    const applyKey = () => {
      const key = keyField.value.trim();
      if (key === (sessionStorage.getItem(KEY_STORAGE) || '') && view.count > 0) return;
      sessionStorage.setItem(KEY_STORAGE, key);
      if (state.mode === 'live') {
        stopLive();
        backoffMs = 500;
        startLive();
      }
    };
    keyField.addEventListener('change', applyKey);
    keyField.form.addEventListener('submit', (e) => { e.preventDefault(); applyKey(); });
    $('replay-file').addEventListener('change', (e) => replayFile(e.target.files[0]));
    document.addEventListener('dragover', (e) => e.preventDefault());
    document.addEventListener('drop', (e) => {
      e.preventDefault();
      replayFile(e.dataTransfer.files[0]);
    });
    $('play').addEventListener('click', () => (state.playing ? pause() : play()));
    $('step-back').addEventListener('click', () => { pause(); seek(state.index - 1); });
    $('step-fwd').addEventListener('click', () => { pause(); seek(state.index + 1); });
    $('slider').addEventListener('input', (e) => { pause(); seek(Number(e.target.value)); });
    $('speed').addEventListener('change', () => scheduleNext());
    document.addEventListener('keydown', (e) => {
      if (state.mode !== 'replay' || e.target.tagName === 'INPUT' || e.target.tagName === 'SELECT') return;
      if (e.key === 'ArrowLeft') { pause(); seek(state.index - 1); }
      if (e.key === 'ArrowRight') { pause(); seek(state.index + 1); }
      if (e.key === ' ') { e.preventDefault(); state.playing ? pause() : play(); }
    });
  }

  /** The compact layout, and a link to the same replay at full size in a new tab. */
  function embed() {
    document.body.classList.add('embed');
    const full = new URLSearchParams(params);
    full.delete('embed');
    const link = document.createElement('a');
    link.className = 'full';
    link.href = `${location.pathname}?${full}`;
    link.target = '_blank';
    link.rel = 'noopener';
    link.textContent = 'open full size ↗';
    document.querySelector('header').append(link);
  }

  if (embedded) embed();
  wire();
  const replay = params.get('replay');
  if (replay) {
    text('mode', 'replay · loading');
    replayUrl(replay);
  } else {
    text('mode', 'live · connecting');
    startLive();
  }
})();
