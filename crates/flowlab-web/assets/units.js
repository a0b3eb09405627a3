// Sizes and rates as flowlab prints them (flowlab-report's units, which the page tests
// hold these to): the largest unit that keeps the number at 1 or more, three significant
// digits; bytes in 1024s, bits per second in 1000s.
'use strict';

function scaled(v, base, unit) {
  let p = 4;
  while (p > 0 && v < Math.pow(base, p)) p--;
  let s = v / Math.pow(base, p);
  if (p < 4 && s >= base - 0.5) { s /= base; p++; }
  const prec = s < 9.995 ? 2 : s < 99.95 ? 1 : 0;
  return fixed(s, prec) + ' ' + ['', 'K', 'M', 'G', 'T'][p] + unit;
}

// `s` to `prec` decimals as Rust's formatting rounds: a value exactly half-way (as the
// double holds it) goes to the even digit, where toFixed rounds it up — 684.5 MiB is
// "684" in flowlab's tables. The only doubles exactly half-way at 0, 1 and 2 decimals
// are those whose fraction is .5; .25 or .75; .125, .375, .625 or .875.
function fixed(s, prec) {
  const ties = [[0.5], [0.25, 0.75], [0.125, 0.375, 0.625, 0.875]][prec];
  if (!ties.includes(s - Math.floor(s))) return s.toFixed(prec);
  const m = Math.pow(10, prec);
  const k = Math.floor(s * m);
  return ((k % 2 === 0 ? k : k + 1) / m).toFixed(prec);
}
const rate = (bps) => scaled(bps, 1000, 'bits/sec');
const size = (bytes) => scaled(bytes, 1024, 'Bytes');
// A time to wait, as `flowlab run` says it: "42 s", "3 min 05 s", "2 h 07 min".
function wait(seconds) {
  const s = Math.round(Math.max(0, seconds));
  const two = (n) => String(n).padStart(2, '0');
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + two(s % 60) + ' s';
  return Math.floor(s / 3600) + ' h ' + two(Math.floor((s % 3600) / 60)) + ' min';
}

// The pages' two ways of showing figures (the live view's, a study's progress):
// cards of [name, value] into `container`, and a table body of `cells(item)` rows.
function figureCards(container, items) {
  container.replaceChildren(...items.map(([name, value]) => {
    const div = document.createElement('div');
    div.className = 'figure';
    const n = document.createElement('span');
    n.className = 'name';
    n.textContent = name;
    const v = document.createElement('span');
    v.className = 'value';
    v.textContent = value;
    div.append(n, v);
    return div;
  }));
}

function tableRows(table, items, cells) {
  table.tBodies[0].replaceChildren(...items.map((item) => {
    const tr = document.createElement('tr');
    for (const text of cells(item)) {
      const td = document.createElement('td');
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  }));
}
