// The seed-000 experiment in a page: one fragment set fetched from several flowlab
// servers at once (GET /fragments/NAME), split by schedule.js's Scheduler (the port of
// flowlab's own), each fragment verified by its SHA-256 before it counts.
// Query: from=URL (again for each server; default this page's server), mode=adaptive or
// a ratio (1:2), connections=N (per server), sweep=1:2,1:1 (fixed ratios run after it),
// auto=1 (start on load). window.fetchRuns holds every run's result, as the table shows.
'use strict';

const $ = (id) => document.getElementById(id);
const say = (text) => { $('state').textContent = text; };

function hex(buffer) {
  return [...new Uint8Array(buffer)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

// The manifest every server serves; the same set everywhere, each fragment with a SHA-256.
// Why a server's manifest could not be read, and what to do. A browser tells a page
// nothing more than "failed" of a server it cannot reach, of a certificate it does not
// trust and of a request it blocks: name the likely cause from what the page can see.
function unreachable(s, e) {
  if (e.name !== 'TypeError') return 'no fragment set (' + e.message + '): serve it with --fragments DIR --http';
  let url;
  try { url = new URL(s); } catch { return 'not a URL: give it as http://HOST:PORT or https://HOST:PORT'; }
  if (location.protocol === 'https:' && url.protocol === 'http:') {
    return 'an https page cannot fetch from an http server (the browser blocks it): give its https address, or open this page over http';
  }
  const hint = url.protocol === 'https:' && url.origin !== location.origin
    ? ' If its certificate is self-signed (serve --tls-self-signed), open ' + url.origin + '/ in this browser once and accept it, then come back.'
    : '';
  return 'no answer (' + e.message + '): is it running serve --fragments DIR --http?' + hint;
}

async function manifestOf(servers) {
  let first = null;
  for (const s of servers) {
    let m;
    try {
      const r = await fetch(s + '/fragments/manifest.json', { cache: 'no-store' });
      if (!r.ok) throw new Error(r.status + ' ' + (await r.text()).trim());
      m = await r.json();
    } catch (e) {
      throw new Error(s + ': ' + unreachable(s, e));
    }
    const key = JSON.stringify(m.fragments.map((f) => [f.name, f.size, f.sha256]));
    if (first && key !== first.key) throw new Error(s + ' serves another set than ' + servers[0]);
    if (m.fragments.some((f) => !f.sha256)) {
      throw new Error(s + ': its manifest has no SHA-256 (made by an older flowlab): make the set again');
    }
    first = first || { key, m };
  }
  return first.m;
}

// Per server: a line with its bar, bytes and fragments.
function progressRows(servers) {
  $('servers-progress').replaceChildren(...servers.map((s, i) => {
    const div = document.createElement('div');
    div.className = 'figure';
    div.innerHTML = '<span class="name"></span><progress max="1" value="0"></progress><span class="value"></span>';
    div.querySelector('.name').textContent = s;
    div.id = 'server-' + i;
    return div;
  }));
}

function showServer(i, bytes, total, fragments, error) {
  const div = $('server-' + i);
  if (!div) return;
  div.querySelector('progress').value = total ? bytes / total : 0;
  div.querySelector('.value').textContent = size(bytes) + ', ' + fragments + ' fragments' + (error ? ' — ' + error : '');
}

// One fetch of the whole set, split as `mode` says ({adaptive: true} or {ratio: [..]}).
async function run(servers, m, mode, connections) {
  if (!(window.crypto && crypto.subtle)) {
    throw new Error('this browser gives no WebCrypto to this page (not https, not loopback): open it over https');
  }
  const owner = [];
  servers.forEach((_, s) => { for (let c = 0; c < connections; c++) owner.push(s); });
  const sched = new Scheduler(mode, m.fragments.length, owner, []);
  const total = m.fragments.reduce((a, f) => a + f.size, 0);
  const bytes = servers.map(() => 0);
  const kept = servers.map(() => 0);
  const corrupt = servers.map(() => 0);
  const errors = servers.map(() => null);
  const inflight = owner.map(() => new Map()); // worker -> fragment -> AbortController
  // The bars are redrawn once a frame, not once a chunk read (hundreds a second on a
  // fast link, each a layout the phone would pay for).
  let drawing = false;
  const draw = () => {
    if (drawing) return;
    drawing = true;
    requestAnimationFrame(() => {
      drawing = false;
      servers.forEach((_, i) => showServer(i, bytes[i], total, kept[i], errors[i]));
    });
  };
  let wake = () => {};
  const changed = () => { const w = wake; wake = () => {}; w(); };
  const t0 = performance.now();

  async function worker(w) {
    const s = owner[w];
    for (;;) {
      if (sched.isDone() || sched.isStuck()) return;
      const f = sched.next(w);
      if (f === null) {
        if (!sched.alive[w]) return;
        await new Promise((resolve) => { const before = wake; wake = () => { before(); resolve(); }; });
        continue;
      }
      const frag = m.fragments[f];
      const abort = new AbortController();
      inflight[w].set(f, abort);
      try {
        const r = await fetch(servers[s] + '/fragments/' + encodeURIComponent(frag.name), { cache: 'no-store', signal: abort.signal });
        if (r.status === 404 || r.status === 401) {
          errors[s] = frag.name + ': ' + r.status;
          sched.dropped(w, f, true);
          continue;
        }
        if (!r.ok) throw new Error(r.status + ' ' + (await r.text()).trim());
        const reader = r.body.getReader();
        const parts = [];
        let got = 0;
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          parts.push(value);
          got += value.byteLength;
          bytes[s] += value.byteLength;
          draw();
        }
        const body = new Uint8Array(got);
        let at = 0;
        for (const p of parts) { body.set(p, at); at += p.byteLength; }
        const ok = got === frag.size && hex(await crypto.subtle.digest('SHA-256', body)) === frag.sha256;
        inflight[w].delete(f);
        const outcome = sched.delivered(w, f, ok);
        if (outcome === 'corrupt') {
          corrupt[s] += 1;
          errors[s] = frag.name + ': a copy that does not match its SHA-256 (fetched again)';
        }
        if (outcome && outcome.accepted) {
          kept[s] += 1;
          for (const c of outcome.accepted) {
            const other = inflight[c].get(f);
            if (other) other.abort();
          }
        }
      } catch (e) {
        inflight[w].delete(f);
        if (e.name === 'AbortError') {
          sched.dropped(w, f, false);
        } else {
          errors[s] = e.message;
          sched.failed(w);
          for (const [g, a] of inflight[w]) { a.abort(); sched.dropped(w, g, false); }
          changed();
          return;
        }
      } finally {
        draw();
        changed();
      }
    }
  }
  await Promise.all(owner.map((_, w) => worker(w)));
  servers.forEach((_, i) => showServer(i, bytes[i], total, kept[i], errors[i]));
  const seconds = (performance.now() - t0) / 1000;
  return {
    split: mode.ratio ? mode.ratio.join(':') : 'adaptive',
    seconds,
    bits_per_second: (total * 8) / seconds,
    fragments: kept,
    bytes,
    verified: kept.reduce((a, b) => a + b, 0),
    corrupt,
    of: m.fragments.length,
    errors,
  };
}

function parseMode(text) {
  const t = text.trim();
  if (t === '' || t === 'adaptive') return { adaptive: true };
  const parts = t.split(':').map((p) => Number(p));
  if (parts.length < 2 || parts.some((p) => !Number.isInteger(p) || p < 1 || p > 1000)) {
    throw new Error("'" + t + "' is not adaptive nor a ratio like 1:2 (whole numbers, 1 to 1000)");
  }
  return { ratio: parts };
}

function addRow(r) {
  const tr = document.createElement('tr');
  const cells = [
    r.split, r.seconds.toFixed(2) + ' s', rate(r.bits_per_second),
    r.fragments.join(' : '), r.bytes.map(size).join(' : '), r.verified + ' of ' + r.of,
    r.corrupt.join(' : '),
  ];
  for (const text of cells) {
    const td = document.createElement('td');
    td.textContent = text;
    tr.append(td);
  }
  $('runs').tBodies[0].append(tr);
}

async function start() {
  const servers = $('servers').value.split('\n').map((s) => s.trim().replace(/\/+$/, '')).filter(Boolean);
  $('go').disabled = true;
  window.fetchRuns = [];
  try {
    if (servers.length < 1) throw new Error('give at least one server');
    const modes = [parseMode($('mode').value)];
    for (const r of $('sweep').value.split(',').map((s) => s.trim()).filter(Boolean)) modes.push(parseMode(r));
    for (const mode of modes) {
      if (mode.ratio && mode.ratio.length !== servers.length) {
        throw new Error('the ratio ' + mode.ratio.join(':') + ' has ' + mode.ratio.length + ' parts for ' + servers.length + ' servers');
      }
    }
    const connections = Math.min(8, Math.max(1, Number($('connections').value) || 1));
    say('Reading the manifests…');
    const m = await manifestOf(servers);
    for (const mode of modes) {
      progressRows(servers);
      say('Fetching ' + m.fragments.length + ' fragments (' + size(m.file.size) + '), ' + (mode.ratio ? 'ratio ' + mode.ratio.join(':') : 'adaptive') + '…');
      const r = await run(servers, m, mode, connections);
      window.fetchRuns.push(r);
      addRow(r);
      if (r.verified !== r.of) throw new Error(r.of - r.verified + ' fragments could not be had: ' + r.errors.filter(Boolean).join('; '));
    }
    say('Done.');
  } catch (e) {
    say('Failed: ' + e.message);
  } finally {
    $('go').disabled = false;
    document.documentElement.dataset.done = '1';
  }
}

document.addEventListener('DOMContentLoaded', () => {
  const q = new URLSearchParams(location.search);
  const from = q.getAll('from');
  $('servers').value = (from.length ? from : [location.origin]).join('\n');
  if (q.get('mode')) $('mode').value = q.get('mode');
  if (q.get('connections')) $('connections').value = q.get('connections');
  if (q.get('sweep')) $('sweep').value = q.get('sweep');
  $('form').addEventListener('submit', (e) => { e.preventDefault(); start(); });
  if (q.get('auto') === '1') start();
});
