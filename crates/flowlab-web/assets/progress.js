// A study's progress page: the state /progress/events sends (server-sent events), shown
// as it changes. Times, cards and rows: units.js, loaded before it.
'use strict';

const $ = (id) => document.getElementById(id);

function show(p) {
  $('title').textContent = 'Study ' + p.study;
  $('about').textContent = 'Recorded into ' + p.db + '; begun ' + new Date(p.started_unix * 1000).toLocaleString();
  $('bar').max = Math.max(1, p.trials);
  $('bar').value = p.reached;
  let state;
  if (p.error) state = 'Stopped: ' + p.error;
  else if (p.summary) {
    const s = p.summary;
    state = 'Ended: ' + s.ok + ' ok, ' + s.failed + ' failed in ' + wait(s.seconds)
      + (s.done_before ? ', ' + s.done_before + ' recorded before' : '')
      + (s.interrupted ? ' (interrupted: ' + s.not_run + ' not run)' : '')
      + (s.stopped_on_error ? ' (stopped on an error: ' + s.not_run + ' not run)' : '')
      + '.';
  } else state = 'Running: trial ' + Math.min(p.reached + 1, p.trials) + ' of ' + p.trials + '.';
  $('state').textContent = state;
  const shown = [
    ['Trials', p.reached + ' of ' + p.trials],
    ['Ok', String(p.ok)],
    ['Failed', String(p.failed)],
  ];
  if (p.busy || p.abandoned) shown.push(['Skipped', String(p.busy + p.abandoned)]);
  if (p.eta_seconds != null) shown.push(['Time left', wait(p.eta_seconds)]);
  figureCards($('figures'), shown);
  tableRows($('trials'), p.recent, (t) => {
    const ran = t.status === 'ok' || t.status === 'failed' || t.status === 'warmup';
    return [
      t.status === 'warmup' ? 'warm-up ' + t.index + '/' + t.of : t.index + '/' + t.of,
      t.cell || '(one cell)', String(t.repetition), t.status,
      ran ? t.seconds.toFixed(1) + ' s' : '–', t.error ?? '',
    ];
  });
  $('notes-heading').hidden = p.notes.length === 0;
  $('notes').replaceChildren(...p.notes.map((n) => {
    const li = document.createElement('li');
    li.textContent = n;
    return li;
  }));
}

document.addEventListener('DOMContentLoaded', () => {
  const events = new EventSource('/progress/events');
  let ended = false;
  events.onmessage = (e) => {
    const p = JSON.parse(e.data);
    show(p);
    document.documentElement.dataset.updates = String(Number(document.documentElement.dataset.updates || 0) + 1);
    // The run is over: nothing more will come (and the runner is about to go).
    if (p.summary || p.error) { ended = true; events.close(); }
  };
  events.onerror = () => { if (!ended) $('state').textContent = 'Disconnected; trying again…'; };
});
