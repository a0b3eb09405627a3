// flowlab's speed-test page: download, upload and round trips (idle and under load)
// against the server that served it. What it measured is sent to POST /results, which
// answers the document (schema flowlab.web/1) the page then shows and offers.
//
// Query parameters: seconds=N (each way, 1-60), streams=N (transfers at once, 1-16),
// auto=1 (start on load). Sizes and rates: units.js, loaded before it.
'use strict';

const PROBE_EVERY_MS = 100;   // one latency probe in flight at most, this far apart
const IDLE_PROBES = 20;
const INTERVAL_MS = 1000;     // reporting interval, as flowlab test's -i 1
const TICK_MS = 100;          // chart resolution
const FIRST_REQUEST = 1 << 20;
const MOST_DOWN = 256 << 20;  // the largest download request
const MOST_UP = 32 << 20;     // the largest upload request (a Blob of that size)
const REQUEST_MS = 1000;      // requests grow until each takes about this long

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

function bounded(text, fallback, lo, hi) {
  const v = Number(text);
  return Number.isFinite(v) ? Math.min(hi, Math.max(lo, Math.round(v))) : fallback;
}

const ms = (v) => (v == null ? '–' : v.toFixed(v < 10 ? 2 : 1) + ' ms');
const pad = (s, n) => String(s).padStart(n);

let probeSeq = 0;

// This run's id, named by its uploads so that the server can say what of them arrived.
// (crypto.randomUUID needs a secure context; a LAN page over http is not one.)
function newRunId() {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}
let runId = '';

// One round trip: GET /small (one byte, never cached). The time from the request sent
// to the first byte back (Resource Timing) where the browser gives it, else the time
// around the whole fetch.
async function probe(origin) {
  const url = new URL('/small?probe=' + probeSeq++, location.href).href;
  const sent = performance.now();
  try {
    const r = await fetch(url, { cache: 'no-store' });
    await r.arrayBuffer();
    const around = performance.now() - sent;
    const e = performance.getEntriesByName(url).pop();
    performance.clearResourceTimings();
    const timed = e && e.requestStart > 0 && e.responseStart >= e.requestStart;
    return { sent_ms: sent - origin, rtt_ms: timed ? e.responseStart - e.requestStart : around };
  } catch (_) {
    return { sent_ms: sent - origin, rtt_ms: null };
  }
}

// Probes until `until()` says stop, one every PROBE_EVERY_MS, times from `origin`.
async function probing(origin, until, into, onProbe) {
  let next = performance.now();
  while (!until()) {
    const p = await probe(origin);
    into.push(p);
    onProbe(p);
    next += PROBE_EVERY_MS;
    const wait = next - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    else next = performance.now();
  }
}

// A count of bytes moved, sampled into intervals and chart points.
class Meter {
  constructor(start) {
    this.start = start;
    this.bytes = 0;
    this.points = [];      // [seconds, bits/s] for the chart
    this.intervals = [];   // {start, end, bytes} in seconds from the start
    this.lastTick = { t: start, bytes: 0 };
    this.lastInterval = { t: start, bytes: 0 };
  }
  add(n) { this.bytes += n; }
  tick(now) {
    const dt = now - this.lastTick.t;
    if (dt > 0) {
      this.points.push([(now - this.start) / 1000, ((this.bytes - this.lastTick.bytes) * 8000) / dt]);
      this.lastTick = { t: now, bytes: this.bytes };
    }
    if (now - this.lastInterval.t >= INTERVAL_MS - TICK_MS / 2) this.closeInterval(now);
  }
  closeInterval(now) {
    if (now <= this.lastInterval.t) return;
    this.intervals.push({
      start: (this.lastInterval.t - this.start) / 1000,
      end: (now - this.start) / 1000,
      bytes: this.bytes - this.lastInterval.bytes,
    });
    this.lastInterval = { t: now, bytes: this.bytes };
  }
}

// One download stream: requests of growing size until aborted.
async function downloadStream(meter, signal) {
  let want = FIRST_REQUEST;
  while (!signal.aborted) {
    const began = performance.now();
    const r = await fetch('/__down?bytes=' + want, { cache: 'no-store', signal });
    if (!r.ok) throw new Error('GET /__down: ' + r.status + ' ' + (await r.text()).trim());
    const reader = r.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      meter.add(value.byteLength);
    }
    if (performance.now() - began < REQUEST_MS && want < MOST_DOWN) want *= 2;
  }
}

// One upload stream: POSTs of growing size until aborted, counting what the browser
// reports sent (XMLHttpRequest's upload progress: fetch reports none).
function uploadOnce(meter, body, signal) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    let counted = 0;
    const count = (loaded) => { meter.add(loaded - counted); counted = loaded; };
    xhr.open('POST', '/__up?run=' + runId);
    xhr.upload.onprogress = (e) => count(e.loaded);
    xhr.upload.onload = () => count(body.size);
    xhr.onload = () => (xhr.status === 200 ? resolve()
      : reject(new Error('POST /__up: ' + xhr.status + ' ' + xhr.responseText.trim())));
    xhr.onerror = () => reject(new Error('POST /__up: the connection failed'));
    xhr.onabort = () => resolve();
    signal.addEventListener('abort', () => xhr.abort(), { once: true });
    xhr.send(body);
  });
}

// The upload bodies, one Blob a size, shared by the streams of a run: a new Blob a
// request (hundreds a second on a fast link, up to 32 MiB each) outruns the browser's
// memory for blobs, and its reads then fail as a connection would.
function blobOf(bodies, want, piece) {
  let body = bodies.get(want);
  if (!body) {
    body = new Blob(new Array(want / piece.byteLength).fill(piece));
    bodies.set(want, body);
  }
  return body;
}

async function uploadStream(meter, signal, piece, bodies) {
  let want = FIRST_REQUEST;
  while (!signal.aborted) {
    const body = blobOf(bodies, want, piece);
    const began = performance.now();
    await uploadOnce(meter, body, signal);
    if (performance.now() - began < REQUEST_MS && want < MOST_UP) want *= 2;
  }
}

// Runs `streams` transfers for `seconds`, probing the round trip meanwhile.
async function load(kind, seconds, streams, onTick, onProbe) {
  const start = performance.now();
  const meter = new Meter(start);
  const probes = [];
  const stop = new AbortController();
  let piece = null;
  const bodies = new Map();
  if (kind === 'upload') {
    piece = new Uint8Array(64 << 10);
    crypto.getRandomValues(piece);
  }
  const ticker = setInterval(() => { meter.tick(performance.now()); onTick(meter); }, TICK_MS);
  const ended = new Promise((r) => setTimeout(r, seconds * 1000));
  const workers = [];
  for (let i = 0; i < streams; i++) {
    const w = kind === 'download' ? downloadStream(meter, stop.signal) : uploadStream(meter, stop.signal, piece, bodies);
    workers.push(w.catch((e) => { if (!stop.signal.aborted) throw e; }));
  }
  let done = false;
  const prober = probing(start, () => done, probes, onProbe);
  let failure = null;
  await Promise.race([ended, Promise.all(workers).catch((e) => { failure = e; })]);
  const end = performance.now();
  done = true;
  stop.abort();
  clearInterval(ticker);
  meter.closeInterval(end);
  await Promise.allSettled(workers);
  await prober;
  if (failure) throw failure;
  return {
    seconds: (end - start) / 1000,
    bytes: meter.bytes,
    intervals: meter.intervals,
    probes,
    points: meter.points,
  };
}

// The charts: bitrate against seconds, round trips against probe number.
const chart = {
  down: [], up: [], idle: [], downRtt: [], upRtt: [],
  draw() {
    drawLines($('rate'), [[this.down, '--down'], [this.up, '--up']], (v) => (v / 1e6).toFixed(v < 1e7 ? 1 : 0));
    const series = [this.idle, this.downRtt, this.upRtt];
    let x = 0;
    const placed = series.map((s) => s.map((p) => [x++, p]));
    drawLines($('rtt'), [[placed[0], '--idle'], [placed[1], '--down'], [placed[2], '--up']], (v) => v.toFixed(v < 10 ? 1 : 0), true);
  },
};

function drawLines(canvas, series, label, dots) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width;
  const h = Math.round(w * (canvas.height / canvas.width)) || canvas.height;
  if (canvas.width !== Math.round(w * ratio)) { canvas.width = Math.round(w * ratio); canvas.height = Math.round(h * ratio); }
  const g = canvas.getContext('2d');
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, w, h);
  const all = series.flatMap(([s]) => s);
  const xmax = Math.max(1, ...all.map((p) => p[0]));
  const ymax = Math.max(1e-9, ...all.map((p) => p[1])) * 1.1;
  const left = 40, bottom = h - 16;
  const style = getComputedStyle(document.documentElement);
  g.font = '11px system-ui, sans-serif';
  g.fillStyle = g.strokeStyle = 'rgba(128,128,128,0.8)';
  for (let i = 0; i <= 4; i++) {
    const y = bottom - (bottom - 6) * (i / 4);
    g.fillText(label((ymax * i) / 4), 2, y + 4);
    g.globalAlpha = 0.25; g.beginPath(); g.moveTo(left, y); g.lineTo(w, y); g.stroke(); g.globalAlpha = 1;
  }
  for (const [points, color] of series) {
    g.strokeStyle = g.fillStyle = style.getPropertyValue(color).trim() || '#888';
    g.beginPath();
    points.forEach(([x, y], i) => {
      const px = left + ((w - left - 4) * x) / xmax, py = bottom - ((bottom - 6) * y) / ymax;
      if (dots) g.fillRect(px - 1.5, py - 1.5, 3, 3);
      else if (i === 0) g.moveTo(px, py); else g.lineTo(px, py);
    });
    if (!dots) { g.lineWidth = 2; g.stroke(); }
  }
}

// The document's figures as flowlab test's summary prints them.
function table(doc) {
  const lines = [];
  lines.push('[ ID] Dir  Interval           Transfer     Bitrate');
  for (const t of doc.tests) {
    for (const [end, s] of [['sender', t.sum.sender], ['receiver', t.sum.receiver]]) {
      if (!s) continue;
      lines.push('[SUM] ' + t.direction.padEnd(4) + ' ' + pad('0.00', 6) + '-' + s.seconds.toFixed(2).padEnd(6) +
        '  sec  ' + pad(size(s.bytes), 12) + '  ' + pad(rate(s.bits_per_second), 15) + '  ' + end);
    }
  }
  const l = doc.tests[0].latency;
  lines.push('Latency: HTTP round trips (GET /small) every ' + l.interval_seconds + ' s');
  lines.push('          probes    lost      min   median      p90      p99      max  (ms)');
  const row = (name, sum) => {
    const r = sum.rtt;
    const f = (v) => pad(r ? v.toFixed(3) : '-', 9);
    lines.push(name.padEnd(10) + pad(sum.sent, 6) + pad(sum.lost, 8) +
      (r ? f(r.min_ms) + f(r.median_ms) + f(r.p90_ms) + f(r.p99_ms) + f(r.max_ms) : ''));
  };
  row('idle', l.idle);
  for (const t of doc.tests) row('loaded ' + t.direction, t.latency.loaded);
  for (const t of doc.tests) {
    const a = t.latency.added;
    if (a.median_ms == null) continue;
    const word = (v) => (v >= 0 ? 'higher' : 'lower');
    lines.push('Under load (' + t.direction + ') the median was ' + Math.abs(a.median_ms).toFixed(3) + ' ms ' +
      word(a.median_ms) + ', p99 ' + Math.abs(a.p99_ms).toFixed(3) + ' ms ' + word(a.p99_ms) +
      (t.latency.queue_building ? ': a standing queue.' : ': no standing queue.'));
  }
  const st = doc.start;
  lines.push('TCP congestion control: server ' + (st.congestion_server || 'unknown') +
    ' (downloads); uploads: the browser\'s system');
  lines.push(st.http_version + (st.secure ? ' over TLS' : ' in the clear') + ', ' + st.streams +
    ' transfers at once; flowlab ' + st.flowlab_version);
  return lines.join('\n');
}

function say(text) { $('state').textContent = text; }

async function post(run) {
  const r = await fetch('/results', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(run),
  });
  const doc = await r.json();
  if (!r.ok) throw new Error('the server refused the result: ' + doc.error);
  return doc;
}

async function run() {
  const seconds = bounded($('seconds').value, 10, 1, 60);
  const streams = bounded($('streams').value, 4, 1, 16);
  $('seconds').value = seconds;
  $('streams').value = streams;
  $('go').disabled = true;
  $('json').hidden = true;
  runId = newRunId();
  $('table').textContent = '';
  for (const k of ['down', 'up', 'idle', 'downRtt', 'upRtt']) chart[k] = [];
  for (const id of ['down', 'up', 'idle', 'loaded']) $(id).textContent = '–';
  try {
    say('Idle latency…');
    const idle = [];
    const origin = performance.now();
    for (let i = 0; i < IDLE_PROBES; i++) {
      const p = await probe(origin);
      idle.push(p);
      if (p.rtt_ms != null) chart.idle.push(p.rtt_ms);
      await new Promise((r) => setTimeout(r, PROBE_EVERY_MS));
    }
    const idleRtts = idle.filter((p) => p.rtt_ms != null).map((p) => p.rtt_ms).sort((a, b) => a - b);
    $('idle').textContent = ms(idleRtts[Math.floor(idleRtts.length / 2)]);
    chart.draw();
    const live = (which, key, rttKey) => [
      (m) => { chart[key] = m.points.slice(); $(which).textContent = rate(m.points.length ? m.points[m.points.length - 1][1] : 0); chart.draw(); },
      (p) => { if (p.rtt_ms != null) { chart[rttKey].push(p.rtt_ms); $('loaded').textContent = ms(p.rtt_ms); } },
    ];
    say('Download…');
    const down = await load('download', seconds, streams, ...live('down', 'down', 'downRtt'));
    $('down').textContent = rate((down.bytes * 8) / down.seconds);
    say('Upload…');
    const up = await load('upload', seconds, streams, ...live('up', 'up', 'upRtt'));
    $('up').textContent = rate((up.bytes * 8) / up.seconds);
    say('Sending the result…');
    const strip = (t) => ({ seconds: t.seconds, bytes: t.bytes, intervals: t.intervals, probes: t.probes });
    const doc = await post({
      run: runId, streams, seconds, probe_interval_seconds: PROBE_EVERY_MS / 1000, idle,
      download: strip(down), upload: strip(up),
    });
    const [d, u] = doc.tests;
    $('down').textContent = rate(d.sum.receiver.bits_per_second);
    // What arrived, where the server counted it; else what the browser sent.
    $('up').textContent = rate((u.sum.receiver || u.sum.sender).bits_per_second);
    const median = (s) => (s.rtt ? s.rtt.median_ms : null);
    $('idle').textContent = ms(median(d.latency.idle));
    $('loaded').textContent = ms(Math.max(median(d.latency.loaded) ?? 0, median(u.latency.loaded) ?? 0));
    $('table').textContent = table(doc);
    const link = $('json');
    if (link.href) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(new Blob([JSON.stringify(doc, null, 2)], { type: 'application/json' }));
    link.hidden = false;
    say('Done.');
    document.documentElement.dataset.done = '1';
  } catch (e) {
    say('Failed: ' + e.message);
    console.error('flowlab speed test failed: ' + e.message);
  } finally {
    $('go').disabled = false;
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('server').textContent = 'Measuring against ' + location.host;
  for (const id of ['seconds', 'streams']) if (params.has(id)) $(id).value = params.get(id);
  $('go').addEventListener('click', run);
  window.addEventListener('resize', () => chart.draw());
  chart.draw();
  if (params.get('auto') === '1') run();
});
