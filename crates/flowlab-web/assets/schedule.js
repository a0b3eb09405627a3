// Which server fetches which fragment, and when: flowlab's scheduler
// (crates/flowlab-fragments/src/schedule.rs) for pages. One port, held to the Rust one:
// the same calls give the same answers on the fixtures both replay
// (crates/flowlab-fragments/tests/fixtures/schedule/), so the two cannot drift. Read the
// Rust module for the why of each rule; this says what, in the same order.
//
// Modes: {adaptive: true} or {ratio: [a, b, ...]}. Workers are connections, each owned by a
// server (owner[w]); fragments are numbered in manifest order.
'use strict';

const MAX_TRIES = 3;

// Deals n fragments to servers in the ratio's interleaved pattern.
function assignRatio(n, ratio) {
  const out = [];
  if (ratio.every((k) => k === 0)) return out;
  for (;;) {
    for (let server = 0; server < ratio.length; server++) {
      for (let i = 0; i < ratio[server]; i++) {
        if (out.length === n) return out;
        out.push(server);
      }
    }
  }
}

class Scheduler {
  constructor(mode, fragments, owner, done) {
    this.adaptive = !mode.ratio;
    this.owner = owner.slice();
    this.alive = owner.map(() => true);
    const isDone = (i) => Boolean(done && done[i]);
    // Per fragment: 'pending', 'done', or the workers that hold it in flight.
    this.states = [];
    for (let f = 0; f < fragments; f++) this.states.push(isDone(f) ? 'done' : 'pending');
    this.assigned = new Array(fragments).fill(null);
    if (mode.ratio) {
      const ownOf = mode.ratio.map((_, server) => owner.map((o, w) => [o, w]).filter(([o]) => o === server).map(([, w]) => w));
      const nextOf = mode.ratio.map(() => 0);
      assignRatio(fragments, mode.ratio).forEach((server, frag) => {
        const own = ownOf[server];
        if (own.length === 0) return;
        this.assigned[frag] = own[nextOf[server] % own.length];
        nextOf[server]++;
      });
    }
    // A fragment no worker was dealt (its server has none) is everyone's.
    this.orphans = new Set();
    for (let f = 0; f < fragments; f++) {
      if (mode.ratio && this.assigned[f] === null && !isDone(f)) this.orphans.add(f);
    }
    this.corruptFrom = this.states.map(() => []);
    this.refusedBy = this.states.map(() => []);
  }

  isPending(f) { return this.states[f] === 'pending'; }
  holders(f) { return Array.isArray(this.states[f]) ? this.states[f] : null; }

  eligible(worker, frag) {
    const server = this.owner[worker];
    if (!this.alive[worker] || this.refusedBy[frag].includes(server)) return false;
    const failures = this.corruptFrom[frag].filter((s) => s === server).length;
    if (failures === 0) return true;
    return failures < MAX_TRIES && !this.alive.some((alive, w) => {
      const o = this.owner[w];
      return o !== server && alive && !this.refusedBy[frag].includes(o) && !this.corruptFrom[frag].includes(o);
    });
  }

  claim(worker, frag) {
    const h = this.holders(frag);
    if (h) h.push(worker);
    else this.states[frag] = [worker];
    return frag;
  }

  serverAlive(server) {
    return this.owner.some((o, w) => o === server && this.alive[w]);
  }

  // The fragment `worker` should request next, or null.
  next(worker) {
    if (!this.alive[worker]) return null;
    const server = this.owner[worker];
    const n = this.states.length;
    for (let f = 0; f < n; f++) {
      if (this.assigned[f] === worker && this.isPending(f) && this.eligible(worker, f)) return this.claim(worker, f);
    }
    if (this.adaptive) {
      for (let f = 0; f < n; f++) {
        if (this.isPending(f) && this.eligible(worker, f)) return this.claim(worker, f);
      }
    } else {
      const orphans = [...this.orphans].sort((a, b) => a - b);
      for (const f of orphans) {
        const a = this.assigned[f];
        if (this.isPending(f) && this.eligible(worker, f) && (a === null || a === worker || !this.eligible(a, f))) {
          return this.claim(worker, f);
        }
      }
    }
    // End game (adaptive): a second copy of the last fragment handed out that is in
    // flight on one other server only.
    if (this.adaptive) {
      for (let f = n - 1; f >= 0; f--) {
        const h = this.holders(f);
        if (h && h.length === 1 && !h.some((w) => this.owner[w] === server) && this.eligible(worker, f)) {
          return this.claim(worker, f);
        }
      }
    }
    return null;
  }

  release(worker, frag) {
    const h = this.holders(frag);
    if (!h) return;
    const left = h.filter((w) => w !== worker);
    this.states[frag] = left.length ? left : 'pending';
  }

  maybeOrphaned(frag, server) {
    const w = this.assigned[frag];
    if (!this.adaptive && w !== null && (server === null || this.owner[w] === server)) this.orphans.add(frag);
  }

  // `worker` delivered `frag`: {accepted: [workers to cancel]}, 'duplicate' or 'corrupt'.
  delivered(worker, frag, verified) {
    if (this.states[frag] === 'done') return 'duplicate';
    if (!verified) {
      const server = this.owner[worker];
      this.corruptFrom[frag].push(server);
      this.maybeOrphaned(frag, server);
      this.release(worker, frag);
      return 'corrupt';
    }
    const h = this.holders(frag);
    const cancel = h ? h.filter((w) => w !== worker) : [];
    this.states[frag] = 'done';
    this.orphans.delete(frag);
    return { accepted: cancel };
  }

  dropped(worker, frag, refused) {
    if (refused) {
      const server = this.owner[worker];
      this.refusedBy[frag].push(server);
      this.maybeOrphaned(frag, server);
    }
    this.release(worker, frag);
  }

  failed(worker) {
    this.alive[worker] = false;
    for (let f = 0; f < this.states.length; f++) if (this.holders(f)) this.release(worker, f);
    for (let f = 0; f < this.states.length; f++) {
      if (this.assigned[f] === worker && this.states[f] !== 'done') this.maybeOrphaned(f, null);
    }
  }

  isDone() { return this.states.every((s) => s === 'done'); }

  isStuck() {
    return !this.isDone()
      && !this.states.some((s) => Array.isArray(s))
      && this.states.every((s, f) => s !== 'pending' || this.alive.every((_, w) => !this.eligible(w, f)));
  }

  remaining() { return this.states.filter((s) => s !== 'done').length; }
}
