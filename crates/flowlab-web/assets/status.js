// flowlab's server status page: the state /status/events sends (server-sent events),
// shown as it changes. Sizes, rates, cards and rows: units.js, loaded before it.
'use strict';

const $ = (id) => document.getElementById(id);

const since = (unix) => Math.max(0, Date.now() / 1000 - unix).toFixed(0) + ' s';

function show(s) {
  $('about').textContent = 'flowlab ' + s.flowlab_version + ', up ' + since(s.started_unix);
  const t = s.totals;
  const figures = [
    ['Running', String(s.running.length)],
    ['Tests served', String(t.tests_served)],
    ['Tests failed', String(t.tests_failed)],
    ['Refused', String(t.refused + t.http_refused)],
    ['Received', size(t.bytes_received + t.http_bytes_received)],
    ['Sent', size(t.bytes_sent + t.http_bytes_sent)],
    ['HTTP transfers', String(t.http_downloads + t.http_uploads)],
    ['Page runs', String(t.page_runs)],
  ];
  figureCards($('totals'), figures);
  tableRows($('running'), s.running, (r) => [r.test, r.client, r.protocol, r.direction, r.streams, since(r.started_unix)]);
  tableRows($('recent'), s.recent, (r) => [
    r.test ?? '–', r.client, r.protocol ?? '–',
    r.bytes_received == null ? '–' : size(r.bytes_received),
    r.bytes_sent == null ? '–' : size(r.bytes_sent),
    r.seconds ? rate((8 * Math.max(r.bytes_received, r.bytes_sent)) / r.seconds) : '–',
    r.error ?? 'served',
  ]);
}

document.addEventListener('DOMContentLoaded', () => {
  const events = new EventSource('/status/events');
  events.onopen = () => { $('state').textContent = 'Live.'; };
  events.onmessage = (e) => {
    show(JSON.parse(e.data));
    document.documentElement.dataset.updates = String(Number(document.documentElement.dataset.updates || 0) + 1);
  };
  events.onerror = () => { $('state').textContent = 'Disconnected; trying again…'; };
});
