// The live view in a real browser (run by scripts/browser-test.sh).
//
//   node live-view.mjs PORT MODEL_NAME
//   env: KVLAB_API_KEY (the server's key, if any), RECORDING (the file the server
//        records to with --record), SCREENSHOTS=1 (write the book's figures),
//        KVLAB_BIN (unused here: the load comes from fetch, below).
//
// Against a running `kvlab serve`: opens the page at /, sends a small load of streamed
// completions sharing a prompt prefix, and checks that (a) what the page draws is the
// snapshot it holds, block by block, and shared blocks show up; (b) once the engine is
// idle, the page's numbers are /metrics's; (c) the recording replays: as many
// iterations as the file holds, step k draws snapshot k, play and pause work.
// Every wait is bounded; a failure exits 1 with what differed.
import { chromium } from 'playwright-core';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const PORT = process.argv[2] || process.env.KVLAB_PORT;
const MODEL = process.argv[3] || process.env.KVLAB_MODEL || 'smollm2-135m-instruct';
const KEY = process.env.KVLAB_API_KEY || '';
const RECORDING = process.env.RECORDING || '';
const SCREENSHOTS = process.env.SCREENSHOTS === '1';
const BASE = `http://127.0.0.1:${PORT}`;
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const FIGURES = resolve(ROOT, 'book/src/figures');
const started = Date.now();

function log(msg) {
  console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s] ${msg}`);
}

function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}

function check(ok, msg) {
  if (!ok) throw new Error(msg);
}

/** Polls `probe` until it returns a truthy value, or throws after `ms` with `what`. */
async function until(what, ms, probe, every = 100) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

const auth = KEY ? { Authorization: `Bearer ${KEY}` } : {};

// ------------------------------------------------------------------ comparing page and snapshot

/** Runs in the page: the differences between what the page draws and `expected` (the
 *  snapshot the page says it shows, when null). Returns [] when they agree, with a few
 *  facts the test tracks (shared blocks, owners). */
function compareDom(expected) {
  const s = expected || window.kvview.current;
  const errs = [];
  if (!s) return { errs: ['no snapshot shown'] };
  const blocks = s.pool.blocks;
  const cells = document.querySelectorAll('#grid [data-block]');
  if (cells.length !== blocks.length) errs.push(`${cells.length} cells for ${blocks.length} blocks`);
  let multiOwner = 0;
  let sharedCells = 0;
  for (let b = 0; b < Math.min(cells.length, blocks.length) && errs.length < 10; b++) {
    const block = blocks[b];
    const cell = cells[b];
    const owners = (block.owners || []).join(',');
    const refs = block.refs || 0;
    const cls = block.parked ? 'parked' : refs > 0 || owners ? 'used' : 'free';
    if (cell.dataset.block !== String(b)) errs.push(`cell ${b}: data-block ${cell.dataset.block}`);
    for (const c of ['free', 'used', 'parked']) {
      if (cell.classList.contains(c) !== (c === cls)) errs.push(`block ${b}: class "${cell.className}", snapshot says ${cls}`);
    }
    if (cell.classList.contains('shared') !== refs > 1) errs.push(`block ${b}: shared class "${cell.className}" with refs ${refs}`);
    if (cell.dataset.owners !== owners) errs.push(`block ${b}: owners "${cell.dataset.owners}", snapshot "${owners}"`);
    if (cell.dataset.refs !== String(refs)) errs.push(`block ${b}: refs ${cell.dataset.refs}, snapshot ${refs}`);
    if ((block.owners || []).length > 1) multiOwner += 1;
    if (cell.classList.contains('shared')) sharedCells += 1;
  }
  const num = (id) => document.getElementById(id).textContent.trim();
  const numbers = {
    'pool-used': s.pool.used, 'pool-free': s.pool.free, 'pool-parked': s.pool.parked,
    'pool-shared': s.pool.shared, 'pool-total': blocks.length, iteration: s.iteration,
  };
  for (const [id, want] of Object.entries(numbers)) {
    if (num(id) !== String(want)) errs.push(`#${id} shows "${num(id)}", snapshot ${want}`);
  }
  const shown = [...document.querySelectorAll('#requests [data-request]')]
    .map((el) => `${el.dataset.request}:${el.dataset.state}`).join(' ');
  const want = s.requests.map((r) => `${r.id}:${r.state}`).join(' ');
  if (shown !== want) errs.push(`requests shown "${shown}", snapshot "${want}"`);
  const rows = s.batch.reduce((a, b) => a + b.rows, 0);
  if (!num('batch-rows').startsWith(`${rows} / ${s.budget.max_batch_tokens}`)) {
    errs.push(`#batch-rows "${num('batch-rows')}", snapshot ${rows} rows of ${s.budget.max_batch_tokens}`);
  }
  // The snapshot's own totals, from its blocks (what the pool summary promises).
  const count = (f) => blocks.filter(f).length;
  if (s.pool.used !== count((b) => (b.refs || 0) > 0)) errs.push(`snapshot: used ${s.pool.used} is not its blocks with refs > 0`);
  if (s.pool.shared !== count((b) => (b.refs || 0) > 1)) errs.push(`snapshot: shared ${s.pool.shared} is not its blocks with refs > 1`);
  if (s.pool.parked !== count((b) => b.parked)) errs.push(`snapshot: parked ${s.pool.parked} is not its parked blocks`);
  if (s.pool.used + s.pool.free + s.pool.parked !== blocks.length) {
    errs.push(`snapshot: used ${s.pool.used} + free ${s.pool.free} + parked ${s.pool.parked} != ${blocks.length} blocks`);
  }
  return {
    errs, iteration: s.iteration, shared: s.pool.shared, sharedCells, multiOwner,
    running: s.requests.filter((r) => r.state === 'running').length, count: window.kvview.count,
    generated: s.requests.reduce((a, r) => a + r.generated, 0),
  };
}

// ------------------------------------------------------------------ the load

/** One streamed completion, read to its `data: [DONE]`. */
async function complete(prompt, onFirst) {
  const response = await fetch(`${BASE}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 24, stream: true }),
    signal: AbortSignal.timeout(120_000),
  });
  if (!response.ok) throw new Error(`POST /v1/completions: ${response.status} ${await response.text()}`);
  const decoder = new TextDecoder();
  let text = '';
  let first = false;
  for await (const chunk of response.body) {
    text += decoder.decode(chunk, { stream: true });
    if (!first && text.includes('data: {')) {
      first = true;
      onFirst?.();
    }
  }
  if (!text.includes('data: [DONE]')) throw new Error(`a streamed completion ended without [DONE]: ${text.slice(-200)}`);
}

/** 8 completions sharing a prompt prefix of several blocks: the first one alone, the
 *  others once its prefix is in the pool, so they reuse its blocks (the prefix cache). */
async function load() {
  const prefix = 'You are a careful assistant who explains how a paged KV cache works. ' +
    'A block holds the keys and values of sixteen tokens; a block table maps a sequence ' +
    'to its blocks; blocks with the same prompt prefix can be shared between requests, ' +
    'and a reference count says how many block tables hold each block. Question: ';
  const questions = ['what is a block?', 'why share blocks?', 'what is a block table?',
    'what does the reference count do?', 'what happens when the pool is full?',
    'what is preemption?', 'what is the prefix cache?', 'why are blocks sixteen tokens?'];
  let firstDone;
  const firstToken = new Promise((r) => (firstDone = r));
  const head = complete(prefix + questions[0], firstDone);
  await Promise.race([firstToken, head]);
  const rest = questions.slice(1).map((q) => complete(prefix + q));
  await Promise.all([head, ...rest]);
}

async function metrics() {
  const response = await fetch(`${BASE}/metrics`, { headers: auth, signal: AbortSignal.timeout(5000) });
  const text = await response.text();
  const value = (name) => {
    const line = text.split('\n').find((l) => l.startsWith(`${name} `));
    return line === undefined ? NaN : Number(line.slice(name.length + 1));
  };
  return {
    used: value('kvlab_kv_blocks_used'), free: value('kvlab_kv_blocks_free'), total: value('kvlab_kv_blocks'),
    running: value('kvlab_requests_running'), waiting: value('kvlab_requests_waiting'),
  };
}

// ------------------------------------------------------------------ recordings

/** The snapshots of a recording, read as the page reads it: `]` may be missing. */
function readRecording(raw) {
  let t = raw.trim().replace(/,\s*$/, '');
  if (!t.endsWith(']')) t += ']';
  return JSON.parse(t).filter((e) => e && e.name === 'iteration' && e.args && e.args.snapshot).map((e) => e.args.snapshot);
}

async function seek(page, k) {
  await page.evaluate((i) => {
    const slider = document.getElementById('slider');
    slider.value = String(i);
    slider.dispatchEvent(new Event('input'));
  }, k);
}

async function expectFrame(page, snaps, k, what) {
  const r = await page.evaluate(compareDom, snaps[k]);
  const shown = await page.evaluate(() => window.kvview.current && window.kvview.current.iteration);
  check(shown === snaps[k].iteration, `${what}: the page holds iteration ${shown}, step ${k} is iteration ${snaps[k].iteration}`);
  check(r.errs.length === 0, `${what} (step ${k}, iteration ${snaps[k].iteration}): ${r.errs.join('; ')}`);
}

// ------------------------------------------------------------------ the test

async function live(page) {
  await page.goto(`${BASE}/`, { timeout: 15_000 });
  if (KEY) {
    // The page asks for the key, and connects once it has it.
    await until('the page to ask for the API key', 10_000, async () =>
      (await page.textContent('#message')).includes('needs its API key'));
    await page.fill('#api-key', KEY);
    await page.press('#api-key', 'Enter');
    log('the page asked for the API key; typed it');
  }
  await until('a first snapshot in the page', 15_000, () => page.evaluate(() => window.kvview.count > 0));
  const count0 = await page.evaluate(() => window.kvview.count);
  log(`live: ${count0} snapshot(s) before the load`);

  // (a) during the load, the page draws the snapshot it holds; shared blocks show up.
  let loadDone = false;
  let loadError = null;
  const loading = load().then(() => (loadDone = true), (e) => { loadError = e; loadDone = true; });
  let checks = 0;
  let maxShared = 0;
  let maxMultiOwner = 0;
  let maxRunning = 0;
  // The book's figure: the moment with the most going on (requests running, text
  // generated) among those where blocks are shared.
  let shot = null;
  let shotScore = -1;
  const end = Date.now() + 120_000;
  while (!loadDone) {
    if (Date.now() > end) throw new Error('the load did not finish within 120 s');
    const r = await page.evaluate(compareDom, null);
    check(r.errs.length === 0, `live, iteration ${r.iteration}: the page differs from its snapshot: ${r.errs.join('; ')}`);
    checks += 1;
    maxShared = Math.max(maxShared, r.shared);
    maxMultiOwner = Math.max(maxMultiOwner, r.multiOwner);
    maxRunning = Math.max(maxRunning, r.running);
    if (SCREENSHOTS && r.multiOwner > 0 && r.running >= 4 && r.running * 1000 + r.generated > shotScore) {
      shotScore = r.running * 1000 + r.generated;
      shot = { png: await page.screenshot(), iteration: r.iteration, shared: r.shared };
    }
    await new Promise((res) => setTimeout(res, 150));
  }
  await loading;
  if (loadError) throw loadError;
  const count1 = await page.evaluate(() => window.kvview.count);
  log(`live: load done; ${checks} checks of the page against its snapshot, ${count1 - count0} snapshots during the load, ` +
    `up to ${maxRunning} running, ${maxShared} shared blocks, ${maxMultiOwner} with several owners`);
  check(count1 > count0 + 5, `the page received ${count1 - count0} snapshots during the load`);
  check(maxShared > 0, 'no shared block (refs > 1) was seen during the load of requests with a common prefix');
  check(maxMultiOwner > 0, 'no block with more than one owner was seen during the load');
  if (SCREENSHOTS) {
    check(shot, 'no moment with shared blocks and 4 running requests for the screenshot');
    writeFileSync(`${FIGURES}/live-view.png`, shot.png);
    log(`screenshot: book/src/figures/live-view.png (iteration ${shot.iteration}, ${shot.shared} shared blocks)`);
  }

  // (b) idle: the page's numbers are the server's.
  let last = null;
  await until('the page to agree with /metrics once idle', 20_000, async () => {
    const m = await metrics();
    const p = await page.evaluate(() => {
      const s = window.kvview.current;
      const n = (id) => Number(document.getElementById(id).textContent);
      return {
        used: n('pool-used'), free: n('pool-free') + n('pool-parked'), total: n('pool-total'),
        running: document.querySelectorAll('#requests [data-state=running]').length,
        waiting: document.querySelectorAll('#requests [data-state=waiting]').length,
        snapRunning: s.requests.length,
      };
    });
    last = { metrics: m, page: p };
    return m.running === 0 && m.waiting === 0 && p.snapRunning === 0 &&
      ['used', 'free', 'total', 'running', 'waiting'].every((k) => m[k] === p[k]);
  }, 250).catch((e) => {
    throw new Error(`${e.message}: last ${JSON.stringify(last)}`);
  });
  const r = await page.evaluate(compareDom, null);
  check(r.errs.length === 0, `idle: the page differs from its snapshot: ${r.errs.join('; ')}`);
  // The shared prompt's full blocks outlive their requests, parked for the next prompt
  // that starts the same way: the page shows them hatched, neither used nor free.
  const parked = await page.evaluate(() => Number(document.getElementById('pool-parked').textContent));
  check(parked > 0, 'idle: no parked block, though every request shared a prompt prefix');
  log(`idle: page = /metrics: ${JSON.stringify(last.metrics)} (free includes the ${parked} parked blocks)`);
}

async function replay(page) {
  const raw = readFileSync(RECORDING, 'utf8');
  const snaps = readRecording(raw);
  const unfinished = !raw.trim().endsWith(']');
  log(`replay: ${RECORDING}: ${snaps.length} iteration events (${unfinished ? 'unfinished: no closing ]' : 'finished'})`);
  check(snaps.length > 10, `the recording holds only ${snaps.length} iterations`);
  // The bytes node read, so that the page and this test see the same iterations.
  await page.setInputFiles('#replay-file', { name: 'recording.json', mimeType: 'application/json', buffer: Buffer.from(raw) });
  await until('the page to load the recording', 10_000, () =>
    page.evaluate(() => window.kvview.mode === 'replay'));
  const count = await page.evaluate(() => window.kvview.count);
  check(count === snaps.length, `the page loaded ${count} iterations, the file holds ${snaps.length}`);
  check(await page.isVisible('#replay-controls'), 'the replay controls are hidden');
  await expectFrame(page, snaps, 0, 'first frame');

  // Step to the iteration with the most shared blocks, then one forward and back.
  let k = 0;
  snaps.forEach((s, i) => { if (s.pool.shared > snaps[k].pool.shared) k = i; });
  k = Math.min(k, snaps.length - 2);
  await seek(page, k);
  await expectFrame(page, snaps, k, 'slider');
  await page.click('#step-fwd');
  await expectFrame(page, snaps, k + 1, 'step forward');
  await page.click('#step-back');
  await expectFrame(page, snaps, k, 'step back');
  log(`replay: steps draw their snapshots (step ${k}: iteration ${snaps[k].iteration}, ${snaps[k].pool.shared} shared blocks)`);
  if (SCREENSHOTS) {
    await page.screenshot({ path: `${FIGURES}/live-view-replay.png` });
    log('screenshot: book/src/figures/live-view-replay.png');
  }

  // Play moves on by itself; pause stops it.
  await seek(page, 0);
  await page.selectOption('#speed', '4');
  await page.click('#play');
  check((await page.textContent('#play')).trim() === 'Pause', 'the play button does not offer Pause while playing');
  await until('play to advance two iterations', 10_000, () => page.evaluate(() => window.kvview.index >= 2));
  await page.click('#play');
  const paused = await page.evaluate(() => window.kvview.index);
  await new Promise((res) => setTimeout(res, 1200));
  const after = await page.evaluate(() => window.kvview.index);
  check(after === paused, `paused at step ${paused}, yet it moved on to ${after}`);
  await expectFrame(page, snaps, after, 'after pause');
  log(`replay: play went to step ${paused}, pause held it`);

  // A recording from another version is refused, visibly.
  const other = JSON.stringify([{ name: 'iteration', ph: 'X', ts: 0, args: { snapshot: { ...snaps[0], version: 999 } } }]);
  await page.setInputFiles('#replay-file', { name: 'future.json', mimeType: 'application/json', buffer: Buffer.from(other) });
  await until('a message refusing version 999', 5_000, async () =>
    (await page.isVisible('#message')) && (await page.textContent('#message')).includes('version 999'));
  log('replay: a version-999 recording is refused with a message');
}

async function main() {
  if (!PORT) fail('usage: node live-view.mjs PORT MODEL_NAME');
  if (SCREENSHOTS) mkdirSync(FIGURES, { recursive: true });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 30_000,
  });
  const errors = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.setDefaultTimeout(10_000);
    page.on('pageerror', (e) => errors.push(e.message));
    await live(page);
    if (RECORDING) await replay(page);
    else log('replay: skipped (no RECORDING)');
    check(errors.length === 0, `errors in the page: ${errors.join('; ')}`);
  } finally {
    await browser.close();
  }
  log('ok: the live view draws the engine');
}

main().catch((e) => fail(e.stack || e.message));
