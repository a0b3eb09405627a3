//! A shared Wi-Fi medium (sans-IO): an access point and its stations on one channel,
//! both directions on the same air, as DCF shares it: each backlogged transmitter (each
//! station, and the access point for all its downlink queues together) counts down a
//! random backoff while the air is idle, the first to reach zero sends one frame, or an
//! A-MPDU of the frames it has queued for one receiver, and two that reach zero in the
//! same slot collide. Per-frame fairness follows, and with it the performance anomaly of
//! Heusse, Rousseau, Berger-Sabbatel and Duda (INFOCOM 2003): a slow station slows every
//! other. The access point may instead share its downlink by airtime (deficit round robin,
//! as Linux's mac80211 schedules it).
//!
//! The model's numbers, each with its source, are in docs/lab-notes/shared-medium-model.md.
//! Times are nanoseconds on the caller's clock. A topology's `[[medium]]` is forwarded
//! through one (`forward::medium`); its stations' expected rates come from the same
//! timings ([`Preset::alone_bps`], [`Preset::tcp_alone_bps`], [`Preset::busy_shares`]).

use std::collections::VecDeque;

use crate::emulator::Rng;

/// An 802.11 PHY's timings: the channel access and the response to a data frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    /// The standard's name as a topology file gives it ("802.11n").
    pub name: &'static str,
    /// The PHY's preamble and header before the data, ns, and its OFDM symbol (0: DSSS,
    /// whose data is sent bit by bit): what [`Preset::rate`] builds a station's rate of.
    pub preamble_ns: u64,
    pub symbol_ns: u64,
    /// The fastest PHY rate a station of this standard may be given, bits per second.
    pub max_bps: u64,
    pub slot_ns: u64,
    pub sifs_ns: u64,
    /// AIFSN of best effort under DCF: DIFS = SIFS + 2 slots.
    pub aifsn: u64,
    pub cw_min: u32,
    pub cw_max: u32,
    /// MAC header, LLC/SNAP and FCS around an IP packet, bytes.
    pub mpdu_overhead: u32,
    /// The acknowledgement of one frame, and the Block Ack of an A-MPDU, ns (with their
    /// preambles).
    pub ack_ns: u64,
    pub block_ack_ns: u64,
    /// An A-MPDU's limits: bytes, MPDUs and PPDU time (0 bytes: no aggregation).
    pub max_ampdu_bytes: u32,
    pub max_mpdus: usize,
    pub max_ppdu_ns: u64,
}

impl Preset {
    /// 802.11b (DSSS, long preamble): slot 20 µs, SIFS 10, DIFS 50, CW 31–1023, an ACK
    /// of 14 bytes at 1 Mbit/s (304 µs with its preamble), no aggregation.
    pub const B: Preset = Preset {
        name: "802.11b",
        preamble_ns: 192_000,
        symbol_ns: 0,
        max_bps: 11_000_000,
        slot_ns: 20_000,
        sifs_ns: 10_000,
        aifsn: 2,
        cw_min: 31,
        cw_max: 1023,
        mpdu_overhead: 34,
        ack_ns: 304_000,
        block_ack_ns: 304_000,
        max_ampdu_bytes: 0,
        max_mpdus: 1,
        max_ppdu_ns: u64::MAX,
    };
    /// 802.11n (HT mixed, 5 GHz): slot 9 µs, SIFS 16, CW 15–1023, responses at
    /// 24 Mbit/s (an ACK 28 µs, a Block Ack 32 µs), A-MPDUs up to 65 535 bytes, 64
    /// MPDUs, 5.484 ms.
    pub const N: Preset = Preset {
        name: "802.11n",
        preamble_ns: 40_000,
        symbol_ns: 3_600,
        max_bps: 600_000_000,
        slot_ns: 9_000,
        sifs_ns: 16_000,
        aifsn: 2,
        cw_min: 15,
        cw_max: 1023,
        mpdu_overhead: 38,
        ack_ns: 28_000,
        block_ack_ns: 32_000,
        max_ampdu_bytes: 65_535,
        max_mpdus: 64,
        max_ppdu_ns: 5_484_000,
    };

    /// 802.11a (OFDM, 5 GHz): slot 9 µs, SIFS 16, CW 15–1023, a 20 µs preamble and 4 µs
    /// symbols, an ACK at 24 Mbit/s (28 µs), no aggregation; up to 54 Mbit/s.
    pub const A: Preset = Preset {
        name: "802.11a",
        preamble_ns: 20_000,
        symbol_ns: 4_000,
        max_bps: 54_000_000,
        slot_ns: 9_000,
        sifs_ns: 16_000,
        aifsn: 2,
        cw_min: 15,
        cw_max: 1023,
        mpdu_overhead: 36,
        ack_ns: 28_000,
        block_ack_ns: 28_000,
        max_ampdu_bytes: 0,
        max_mpdus: 1,
        max_ppdu_ns: u64::MAX,
    };
    /// 802.11g (OFDM, 2.4 GHz, short slot, no 802.11b station): as 802.11a but a SIFS of
    /// 10 µs, each PPDU (the ACK's too) followed by a 6 µs signal extension, counted
    /// here as part of its preamble.
    pub const G: Preset = Preset {
        name: "802.11g",
        preamble_ns: 26_000,
        sifs_ns: 10_000,
        ack_ns: 34_000,
        block_ack_ns: 34_000,
        ..Preset::A
    };
    /// 802.11ac (VHT, 5 GHz): as 802.11n with a 44 µs preamble (two streams' training
    /// fields and VHT-SIG-B) and A-MPDUs up to 1 048 575 bytes; up to 3 466.8 Mbit/s
    /// (160 MHz, four streams).
    pub const AC: Preset = Preset {
        name: "802.11ac",
        preamble_ns: 44_000,
        max_bps: 3_466_800_000,
        max_ampdu_bytes: 1_048_575,
        ..Preset::N
    };

    /// Every preset, by name.
    pub const ALL: [Preset; 5] = [Preset::B, Preset::A, Preset::G, Preset::N, Preset::AC];

    /// The preset a topology file names ("802.11n").
    pub fn named(name: &str) -> Option<Preset> {
        Self::ALL.into_iter().find(|p| p.name == name)
    }

    /// DIFS (AIFS of best effort).
    pub fn aifs_ns(&self) -> u64 {
        self.sifs_ns + self.aifsn * self.slot_ns
    }

    /// A station's PHY rate of `bps` bits per second in this standard: DSSS, or OFDM
    /// symbols carrying `bps` × the symbol's time (rounded to a whole bit), with the
    /// short guard interval for 802.11n and ac.
    pub fn rate(&self, bps: u64) -> Rate {
        if self.symbol_ns == 0 {
            Rate::Dsss {
                bps,
                preamble_ns: self.preamble_ns,
            }
        } else {
            Rate::Ofdm {
                bits_per_symbol: ((bps as f64 * self.symbol_ns as f64 / 1e9).round() as u64).max(1),
                symbol_ns: self.symbol_ns,
                preamble_ns: self.preamble_ns,
            }
        }
    }

    /// How many of the frames of `sizes` (IP bytes each, in queue order) one
    /// transmission at `rate` carries, and its PSDU's bytes: one frame, or an A-MPDU of
    /// as many as fit the limits (4-byte delimiters, each subframe but the last padded
    /// to 4 bytes).
    pub fn fit(&self, rate: &Rate, mut sizes: impl Iterator<Item = u32>) -> (usize, u64) {
        let Some(first) = sizes.next() else {
            return (0, 0);
        };
        if self.max_ampdu_bytes == 0 {
            return (1, u64::from(first + self.mpdu_overhead));
        }
        let sub = |b: u32| u64::from(4 + b + self.mpdu_overhead);
        let (mut k, mut total) = (1, sub(first));
        for b in sizes.take(self.max_mpdus - 1) {
            let next = total.div_ceil(4) * 4 + sub(b);
            if next > u64::from(self.max_ampdu_bytes) || rate.ppdu_ns(next) > self.max_ppdu_ns {
                break;
            }
            total = next;
            k += 1;
        }
        (k, total)
    }

    /// A transmission of `k` frames of `packet` IP bytes at `rate` as many as fit: the
    /// frames it carries and its time on the air from the PPDU's start to the
    /// response's end, ns.
    fn exchange(&self, rate: &Rate, packet: u32, k: usize) -> (usize, u64) {
        let (k, bytes) = self.fit(rate, std::iter::repeat_n(packet, k));
        let response = if k > 1 {
            self.block_ack_ns
        } else {
            self.ack_ns
        };
        (k, rate.ppdu_ns(bytes) + self.sifs_ns + response)
    }

    /// How long a lone `packet`-byte packet takes across an idle channel at `rate`, from
    /// its arrival to its PPDU's end: an AIFS, a mean backoff and its PPDU, ns.
    pub fn latency_ns(&self, rate: &Rate, packet: u32) -> u64 {
        self.access_ns() as u64 + rate.ppdu_ns(u64::from(packet + self.mpdu_overhead))
    }

    /// The longest a frame may wait for the air behind one transmission at `rate`: that
    /// transmission as full as the standard allows (its PPDU, SIFS and response), then
    /// an AIFS and the longest first backoff, ns.
    pub fn air_wait_ns(&self, rate: &Rate, packet: u32) -> u64 {
        let (_, air) = self.exchange(rate, packet, usize::MAX);
        air + self.aifs_ns() + u64::from(self.cw_min) * self.slot_ns
    }

    /// The mean idle time before a lone sender's transmission: an AIFS and half the
    /// minimum window's slots.
    fn access_ns(&self) -> f64 {
        self.aifs_ns() as f64 + self.slot_ns as f64 * f64::from(self.cw_min) / 2.0
    }

    /// What one busy sender alone on the channel carries at `rate`, IP bits per second
    /// of `packet`-byte packets (UDP, say): each transmission as full as the standard
    /// allows, after an AIFS and a mean backoff.
    pub fn alone_bps(&self, rate: &Rate, packet: u32) -> f64 {
        let (k, air) = self.exchange(rate, packet, usize::MAX);
        k as f64 * f64::from(packet) * 8.0 / ((self.access_ns() + air as f64) / 1e9)
    }

    /// What one TCP flow alone on the channel carries, payload bits per second: its
    /// segments of `mss` bytes (52 bytes of IP and TCP header with timestamps) sent at
    /// `data`, the receiver's acknowledgements (one for every two segments, in one
    /// transmission of their own for each of the sender's) at `ack` — the method of
    /// docs/lab-notes/shared-medium-model.md §3. The two count their backoffs down
    /// together, as DCF's busy senders do (Heusse et al.'s contention for two, lab note
    /// §1), and seldom collide: the acknowledgements reach their queue only once the
    /// segments they acknowledge are delivered, after the sender has begun its next
    /// countdown.
    pub fn tcp_alone_bps(&self, data: &Rate, ack: &Rate, mss: u32) -> f64 {
        let (k, air) = self.exchange(data, mss + 52, usize::MAX);
        // Without aggregation, two transmissions of one segment each a round.
        let (segments, sends) = if k == 1 { (2, 2) } else { (k, 1) };
        let acks = segments.div_ceil(2);
        let (carried, ack_air) = self.exchange(ack, 52, acks);
        let ack_sends = acks.div_ceil(carried.max(1));
        let cw = f64::from(self.cw_min);
        let p_c = 1.0 / (cw + 1.0);
        let backoff = self.slot_ns as f64 * cw / 2.0 * (1.0 + p_c);
        let round = (sends + ack_sends) as f64 * self.aifs_ns() as f64
            + (sends as u64 * air + ack_sends as u64 * ack_air) as f64
            + sends as f64 * backoff;
        segments as f64 * f64::from(mss) * 8.0 / (round / 1e9)
    }

    /// What one TCP flow between two stations of the channel carries alone, payload
    /// bits per second: its segments cross the air twice (the sender's station `from`
    /// to the access point at its `up` rate, the access point to station `to` at that
    /// one's `down` rate), and so do their acknowledgements (`to`'s `up`, then `from`'s
    /// `down`). The sending station and the access point are both busy the whole time,
    /// the one with segments, the other relaying them or their acknowledgements, so
    /// every transmission is contended for by two: each costs two senders' contention
    /// (Heusse et al.'s t_cont(2)) and collides with the chance that two counters end in
    /// one slot, costing the sender's exchange or the other's, the longer (lab note §3a).
    pub fn tcp_relayed_bps(&self, from: [&Rate; 2], to: [&Rate; 2], mss: u32) -> f64 {
        let ([from_up, from_down], [to_up, to_down]) = (from, to);
        let (k, _) = self.exchange(from_up, mss + 52, usize::MAX);
        // Without aggregation, two segments (in two transmissions) a round.
        let segments = if k == 1 { 2 } else { k };
        let acks = segments.div_ceil(2);
        // Each leg of the round: its transmissions and their exchanges' longest and sum.
        let legs = [
            self.transmissions(from_up, mss + 52, segments),
            self.transmissions(to_down, mss + 52, segments),
            self.transmissions(to_up, 52, acks),
            self.transmissions(from_down, 52, acks),
        ];
        let sends: f64 = legs.iter().map(|l| l.0 as f64).sum();
        let air: f64 = legs.iter().map(|l| l.2 as f64).sum();
        let cw = f64::from(self.cw_min);
        let p_c = 1.0 / (cw + 1.0);
        let contention = self.slot_ns as f64 * cw / 2.0 * (1.0 + p_c) / 2.0;
        let jam = self.aifs_ns() as f64 + legs.iter().map(|l| l.1).max().unwrap_or(0) as f64;
        let round = sends * (self.aifs_ns() as f64 + contention + p_c * jam) + air;
        segments as f64 * f64::from(mss) * 8.0 / (round / 1e9)
    }

    /// `n` frames of `packet` IP bytes sent at `rate` in as few transmissions as the
    /// standard allows: how many, the longest exchange and their exchanges' sum, ns.
    fn transmissions(&self, rate: &Rate, packet: u32, n: usize) -> (usize, u64, u64) {
        let (mut left, mut sends, mut longest, mut total) = (n, 0, 0, 0);
        while left > 0 {
            let (k, air) = self.exchange(rate, packet, left);
            left -= k.max(1);
            sends += 1;
            longest = longest.max(air);
            total += air;
        }
        (sends, longest, total)
    }

    /// The PHY rate (both ways, in whole kbit/s) at which one TCP flow alone gets
    /// `target` payload bits per second by [`Preset::tcp_alone_bps`]: how a station's rate
    /// is set from a measured TCP throughput (iperf3's, say). `None` if even the
    /// standard's fastest rate gets less.
    pub fn phy_for_tcp(&self, target: f64) -> Option<u64> {
        let tcp = |kbps: u64| {
            let r = self.rate(kbps * 1000);
            self.tcp_alone_bps(&r, &r, 1448)
        };
        let (mut low, mut high) = (1_000, self.max_bps / 1000);
        if tcp(high) < target {
            return None;
        }
        // The rate only ever helps, in steps of whole symbols: the least that reaches it.
        while low < high {
            let mid = (low + high) / 2;
            if tcp(mid) >= target {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        Some(high)
    }

    /// What each of several senders busy at once gets under DCF's per-transmission
    /// fairness, IP bits per second of `packet`-byte packets, each at its own rate: each
    /// sends one transmission (as full as the standard allows) a round, and the round
    /// adds the contention and collisions of Heusse et al.'s model (equal for all: the
    /// performance anomaly).
    pub fn busy_shares(&self, rates: &[Rate], packet: u32) -> Vec<f64> {
        let exchanges: Vec<(usize, u64)> = rates
            .iter()
            .map(|r| self.exchange(r, packet, usize::MAX))
            .collect();
        let times: Vec<f64> = exchanges
            .iter()
            .map(|&(_, air)| self.aifs_ns() as f64 + air as f64)
            .collect();
        let round = self.dcf_round(&times);
        exchanges
            .iter()
            .map(|&(k, _)| k as f64 * f64::from(packet) * 8.0 / (round / 1e9))
            .collect()
    }

    /// What the access point alone gets to each of several busy stations at `rates`
    /// under [`Policy::Airtime`] charging [`Charge::Ppdu`], IP bits per second of
    /// `packet`-byte packets: each station the same PPDU time (and a SIFS) — x_i
    /// transmissions a second with x_i · c_i equal for all, filling the channel:
    /// Σ x_i · t_i = 1, t_i a transmission's access and exchange.
    pub fn airtime_shares(&self, rates: &[Rate], packet: u32) -> Vec<f64> {
        self.airtime_shares_among(rates, packet, &[])
    }

    /// [`Preset::airtime_shares`] while busy stations at `busy` send 1500-byte packets
    /// all the time ([`Medium::busy_station`]): each of the access point's transmissions
    /// is one of a DCF round in which each busy station makes one too, so t_i is that
    /// round's time.
    pub fn airtime_shares_among(&self, rates: &[Rate], packet: u32, busy: &[Rate]) -> Vec<f64> {
        let others = self.busy_times(busy);
        let txops: Vec<(usize, f64, f64)> = rates
            .iter()
            .map(|r| {
                let (k, bytes) = self.fit(r, std::iter::repeat_n(packet, usize::MAX));
                let (_, air) = self.exchange(r, packet, k);
                let charged = (r.ppdu_ns(bytes) + self.sifs_ns) as f64 / 1e9;
                (k, charged, self.round_with(air as f64, &others) / 1e9)
            })
            .collect();
        let per_charge: f64 = txops.iter().map(|(_, c, t)| t / c).sum();
        txops
            .iter()
            .map(|(k, c, _)| (1.0 / per_charge) / c * *k as f64 * f64::from(packet) * 8.0)
            .collect()
    }

    /// What the access point alone gets to each of several busy stations at `rates`
    /// under [`Policy::RoundRobin`], IP bits per second of `packet`-byte packets, while
    /// busy stations at `busy` send 1500-byte packets all the time: a round of one
    /// transmission (as full as the standard allows) to each, each of them one of a DCF
    /// round in which each busy station makes one too.
    pub fn round_robin_shares(&self, rates: &[Rate], packet: u32, busy: &[Rate]) -> Vec<f64> {
        let others = self.busy_times(busy);
        let txops: Vec<(usize, f64)> = rates
            .iter()
            .map(|r| {
                let (k, air) = self.exchange(r, packet, usize::MAX);
                (k, self.round_with(air as f64, &others))
            })
            .collect();
        let round: f64 = txops.iter().map(|(_, t)| t).sum();
        txops
            .iter()
            .map(|(k, _)| *k as f64 * f64::from(packet) * 8.0 / (round / 1e9))
            .collect()
    }

    /// What one TCP flow carries, payload bits per second, sent at `data` and
    /// acknowledged at `ack` ([`Preset::tcp_alone_bps`]'s round) while busy stations at
    /// `busy` send 1500-byte packets all the time: each of the flow's transmissions is
    /// one of a DCF round in which each busy station makes one too (per-frame fairness),
    /// the acknowledgements' in a round with the segments' (lab note §3b). Without busy
    /// stations, [`Preset::tcp_alone_bps`].
    pub fn tcp_among_bps(&self, data: &Rate, ack: &Rate, mss: u32, busy: &[Rate]) -> f64 {
        if busy.is_empty() {
            return self.tcp_alone_bps(data, ack, mss);
        }
        let others = self.busy_times(busy);
        let (k, air) = self.exchange(data, mss + 52, usize::MAX);
        let (segments, sends) = if k == 1 { (2, 2) } else { (k, 1) };
        let acks = segments.div_ceil(2);
        let (carried, ack_air) = self.exchange(ack, 52, acks);
        let ack_sends = acks.div_ceil(carried.max(1)).min(sends);
        let aifs = self.aifs_ns() as f64;
        let with = |own: &[f64]| {
            let mut times = own.to_vec();
            times.extend(&others);
            self.dcf_round(&times)
        };
        let round = (sends - ack_sends) as f64 * with(&[aifs + air as f64])
            + ack_sends as f64 * with(&[aifs + air as f64, aifs + ack_air as f64]);
        segments as f64 * f64::from(mss) * 8.0 / (round / 1e9)
    }

    /// Each busy station's AIFS and exchange, ns: a transmission as full as the standard
    /// allows of 1500-byte packets at its rate.
    fn busy_times(&self, busy: &[Rate]) -> Vec<f64> {
        busy.iter()
            .map(|r| self.aifs_ns() as f64 + self.exchange(r, 1500, usize::MAX).1 as f64)
            .collect()
    }

    /// A DCF round of one exchange of `air` ns (after an AIFS) and one of each of
    /// `others` (their AIFS and exchange): without others, an AIFS, a mean backoff and
    /// the exchange.
    fn round_with(&self, air: f64, others: &[f64]) -> f64 {
        let mut times = vec![self.aifs_ns() as f64 + air];
        times.extend(others);
        self.dcf_round(&times)
    }

    /// A round of DCF in which each of `times.len()` busy senders makes one exchange of
    /// its `times` (its AIFS and exchange, ns), ns: Bianchi's saturated DCF (JSAC 2000)
    /// with binary exponential backoff from CWmin to CWmax, every sender the same chance
    /// τ to send in a slot; the mean slot E[slot] = (1 − P_tr)·SLOT + τ(1 − τ)^(n−1)·Σ
    /// T_i + (P_tr − nτ(1 − τ)^(n−1))·T_jam (T_jam as Heusse's: the slowest sender's
    /// time when it is one of the two colliding), and a round is E[slot] / (τ(1 −
    /// τ)^(n−1)), the slots between one sender's successes. Alone: an AIFS, a mean
    /// backoff and the exchange. Heusse's first-attempt collision rate overstates
    /// collisions as senders multiply (802.11g at 24 Mbit/s, 32 senders: 19 % under the
    /// medium's own simulation, Bianchi's 1.5 %; lab note §1a).
    fn dcf_round(&self, times: &[f64]) -> f64 {
        if times.is_empty() {
            return 0.0;
        }
        let n = times.len() as i32;
        let tau = self.bianchi_tau(n);
        let alone = tau * (1.0 - tau).powi(n - 1);
        let p_tr = 1.0 - (1.0 - tau).powi(n);
        let sum: f64 = times.iter().sum();
        let slowest = times.iter().copied().fold(0.0, f64::max);
        let nf = f64::from(n);
        let others = if n > 1 {
            (sum - slowest) / (nf - 1.0)
        } else {
            slowest
        };
        let jam = (2.0 / nf).min(1.0) * slowest + (1.0 - 2.0 / nf).max(0.0) * others;
        let slot = (1.0 - p_tr) * self.slot_ns as f64 + alone * sum + (p_tr - nf * alone) * jam;
        slot / alone
    }

    /// Bianchi's τ for `n` saturated senders: the chance that one sends in a given slot,
    /// the fixed point of τ = 2(1 − 2p) / ((1 − 2p)(W + 1) + pW(1 − (2p)^m)) with p = 1 −
    /// (1 − τ)^(n−1), W = CWmin + 1 and m the doublings to CWmax.
    fn bianchi_tau(&self, n: i32) -> f64 {
        let w = f64::from(self.cw_min + 1);
        let m = f64::from(self.cw_max + 1) / w;
        let m = m.log2().round() as i32;
        let mut tau = 2.0 / (w + 1.0);
        for _ in 0..200 {
            let p = 1.0 - (1.0 - tau).powi(n - 1);
            let next = 2.0 * (1.0 - 2.0 * p)
                / ((1.0 - 2.0 * p) * (w + 1.0) + p * w * (1.0 - (2.0 * p).powi(m)));
            tau = 0.5 * tau + 0.5 * next;
        }
        tau
    }

    /// Heusse et al.'s round of DCF (the anomaly paper's model, [`anomaly_model`]), in
    /// which each of `times.len()` busy senders makes one exchange of
    /// its `times` (its AIFS and exchange, ns): their sum, the backoff slots counted down
    /// and the collisions (Heusse et al.'s t_cont and t_jam, lab note §1), ns.
    fn heusse_round(&self, times: &[f64]) -> f64 {
        let n = times.len() as f64;
        if times.is_empty() {
            return 0.0;
        }
        let cw = f64::from(self.cw_min);
        let p_c = 1.0 - (1.0 - 1.0 / (cw + 1.0)).powf(n - 1.0);
        let contention = self.slot_ns as f64 * (cw / 2.0) * (1.0 + p_c);
        let sum: f64 = times.iter().sum();
        // What a collision costs: the slowest sender's exchange when it is one of the
        // two colliding (2/N of collisions), the others' mean otherwise.
        let slowest = times.iter().copied().fold(0.0, f64::max);
        let others = if n > 1.0 {
            (sum - slowest) / (n - 1.0)
        } else {
            slowest
        };
        let jam = (2.0 / n).min(1.0) * slowest + (1.0 - 2.0 / n).max(0.0) * others;
        sum + contention + p_c * jam * n
    }
}

/// A transmitter's PHY rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// DSSS/CCK (802.11b): bits at `bps` after a preamble.
    Dsss { bps: u64, preamble_ns: u64 },
    /// OFDM (802.11a/g/n/ac): `bits_per_symbol` over all streams, symbols of
    /// `symbol_ns` (3 600 with a short guard interval: the data part is then rounded up
    /// to a multiple of 4 µs), after a preamble.
    Ofdm {
        bits_per_symbol: u64,
        symbol_ns: u64,
        preamble_ns: u64,
    },
}

impl Rate {
    /// 802.11b at `mbit` Mbit/s with the long preamble (192 µs).
    pub fn dsss(mbit: f64) -> Rate {
        Rate::Dsss {
            bps: (mbit * 1e6) as u64,
            preamble_ns: 192_000,
        }
    }

    /// How long a PPDU of `bytes` (its PSDU) takes on the air, ns.
    pub fn ppdu_ns(&self, bytes: u64) -> u64 {
        match *self {
            Rate::Dsss { bps, preamble_ns } => {
                preamble_ns + (bytes * 8 * 1_000_000_000).div_ceil(bps.max(1))
            }
            Rate::Ofdm {
                bits_per_symbol,
                symbol_ns,
                preamble_ns,
            } => {
                // 16 service bits and 6 tail bits around the data.
                let symbols = (16 + 8 * bytes + 6).div_ceil(bits_per_symbol.max(1));
                let data = symbols * symbol_ns;
                preamble_ns + data.div_ceil(4_000) * 4_000
            }
        }
    }
}

/// How the access point picks the station its next transmission goes to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// One transmission per backlogged station in turn: DCF's per-frame fairness.
    RoundRobin,
    /// Deficit round robin on airtime: each station's turn lasts while its deficit is
    /// positive; a transmission to it costs what `charge` says, and a turn adds
    /// `quantum_ns`.
    Airtime { quantum_ns: u64, charge: Charge },
}

/// What a transmission to a station costs it under [`Policy::Airtime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// The channel time from the previous transmission's end to this one's end.
    Txop,
    /// The PPDU and a SIFS, as mac80211 counts a frame's airtime.
    Ppdu,
}

/// One transmission on the air: who sent what to whom, when it began, when its frames
/// are delivered (the PPDU's end), and when the air is free again (the response's end).
#[derive(Debug, Clone, PartialEq)]
pub struct Txop<T> {
    pub from: usize,
    pub to: usize,
    pub frames: Vec<T>,
    /// The frames it carried: `frames.len()`, or a busy station's count.
    pub carried: usize,
    pub start: u64,
    pub deliver: u64,
    pub end: u64,
}

/// A node of the medium: the access point (0) or a station.
#[derive(Debug)]
struct Node<T> {
    /// The station's uplink (one queue, to the access point), or the access point's
    /// queue to each station (by station).
    queues: Vec<VecDeque<(T, u32)>>,
    /// Its PHY rate towards the access point (a station) — the access point sends to
    /// each station at that station's `down` rate.
    up: Rate,
    down: Rate,
    cw: u32,
    /// Backoff slots left, and since when it counts them (after an AIFS).
    counter: Option<u64>,
    armed_at: u64,
    /// Under [`Policy::Airtime`]: the access point's deficit towards this station, ns.
    deficit: i64,
    /// A busy station ([`Medium::busy_station`]): it always has packets of this many IP
    /// bytes for the access point, and its queue is never read.
    busy: Option<u32>,
}

/// One channel: an access point and its stations ([`Medium::station`]).
#[derive(Debug)]
pub struct Medium<T> {
    preset: Preset,
    policy: Policy,
    nodes: Vec<Node<T>>,
    /// The end of the last transmission: the air is busy until then.
    air_free: u64,
    /// Under round robin, the station the access point served last.
    last_served: usize,
    rng: Rng,
    /// Frames each queue may hold.
    limit: usize,
}

impl<T> Medium<T> {
    /// A channel with `preset`'s timings whose access point shares its downlink by
    /// `policy`; each queue holds up to `limit` frames.
    pub fn new(preset: Preset, policy: Policy, limit: usize, seed: u64) -> Self {
        // The access point sends to each station at that station's `down` rate: its own
        // rates are never read.
        let ap = Node {
            queues: vec![VecDeque::new()],
            up: Rate::dsss(1.0),
            down: Rate::dsss(1.0),
            cw: preset.cw_min,
            counter: None,
            armed_at: 0,
            deficit: 0,
            busy: None,
        };
        Medium {
            preset,
            policy,
            nodes: vec![ap],
            air_free: 0,
            last_served: 0,
            rng: Rng::new(seed),
            limit: limit.max(1),
        }
    }

    /// Adds a station sending at `up` and receiving at `down`; its number (from 1).
    pub fn station(&mut self, up: Rate, down: Rate) -> usize {
        self.nodes.push(Node {
            queues: vec![VecDeque::new()],
            up,
            down,
            cw: self.preset.cw_min,
            counter: None,
            armed_at: 0,
            deficit: 0,
            busy: None,
        });
        let n = self.nodes.len() - 1;
        self.nodes[0].queues.resize_with(n + 1, VecDeque::new);
        n
    }

    /// Adds a busy station: one that always has `packet`-byte packets for the access
    /// point and sends them at `up` (as many as a transmission carries), contending as
    /// any station does — the other devices on a channel. Its transmissions hand out no
    /// frames (`Txop::frames` empty, `Txop::carried` their count); nothing is ever sent
    /// to it. Its number (from 1).
    pub fn busy_station(&mut self, up: Rate, packet: u32) -> usize {
        let n = self.station(up, up);
        let draw = self.draw(self.preset.cw_min);
        let free = self.air_free;
        let node = &mut self.nodes[n];
        node.busy = Some(packet);
        node.counter = Some(draw);
        node.armed_at = free;
        n
    }

    /// Station `station`'s rates from now on, as [`Medium::station`] gave them: a
    /// transmission already begun keeps its own. Ignored for a station it does not have.
    pub fn set_rates(&mut self, station: usize, up: Rate, down: Rate) {
        if let Some(n) = self.nodes.get_mut(station).filter(|_| station > 0) {
            (n.up, n.down) = (up, down);
        }
    }

    /// Its standard's timings.
    pub fn preset(&self) -> Preset {
        self.preset
    }

    /// Queues `packet` of `bytes` (its IP length) at `now` from station `from` to the
    /// access point, or (from 0, the access point) to station `to`; handed back when its
    /// queue is full.
    pub fn push(
        &mut self,
        now: u64,
        from: usize,
        to: usize,
        packet: T,
        bytes: u32,
    ) -> Result<(), T> {
        let q = if from == 0 { to } else { 0 };
        let Some(queue) = self.nodes.get(from).and_then(|n| n.queues.get(q)) else {
            return Err(packet);
        };
        if queue.len() >= self.limit {
            return Err(packet);
        }
        let was_idle = !self.backlogged(from);
        self.nodes[from].queues[q].push_back((packet, bytes));
        if self.nodes[from].counter.is_none() {
            let draw = self.draw(self.nodes[from].cw);
            self.nodes[from].counter = Some(draw);
        }
        if was_idle {
            // It contends from now: an AIFS, then what is left of its backoff. Slots
            // begin at the same moments for every contender, counted from the end of the
            // air's last transmission: one that starts contending within a slot starts
            // at the next, so that two whose backoffs end in the same slot collide.
            let (free, slot) = (self.air_free, self.preset.slot_ns);
            let node = &mut self.nodes[from];
            let at = node.armed_at.max(now).max(free);
            node.armed_at = free + (at - free).div_ceil(slot) * slot;
        }
        Ok(())
    }

    fn draw(&mut self, cw: u32) -> u64 {
        self.rng.next_u64() % (u64::from(cw) + 1)
    }

    fn backlogged(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        n.busy.is_some() || n.queues.iter().any(|q| !q.is_empty())
    }

    /// When node `i`'s backoff reaches zero, if it contends.
    fn expiry(&self, i: usize) -> Option<u64> {
        let n = &self.nodes[i];
        let c = n.counter?;
        self.backlogged(i)
            .then(|| n.armed_at + self.preset.aifs_ns() + c * self.preset.slot_ns)
    }

    /// When the next transmission begins, if anything is queued.
    pub fn next_due(&self) -> Option<u64> {
        (0..self.nodes.len()).filter_map(|i| self.expiry(i)).min()
    }

    /// Makes every transmission that begins by `now`, handing each to `out` (its frames
    /// are delivered at its `deliver` time).
    pub fn poll(&mut self, now: u64, out: &mut impl FnMut(Txop<T>)) {
        while let Some(start) = self.next_due().filter(|&t| t <= now) {
            let winners: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.expiry(i) == Some(start))
                .collect();
            // The others freeze their counters at `start`, and go on once the air is free.
            let (aifs, slot) = (self.preset.aifs_ns(), self.preset.slot_ns);
            for i in 0..self.nodes.len() {
                if winners.contains(&i) {
                    continue;
                }
                let n = &mut self.nodes[i];
                if let Some(c) = n.counter {
                    let counting_from = n.armed_at + aifs;
                    let done = start.saturating_sub(counting_from) / slot;
                    n.counter = Some(c.saturating_sub(done));
                }
            }
            let end = if let [one] = winners[..] {
                let txop = self.transmit(one, start);
                let end = txop.end;
                out(txop);
                let cw_min = self.preset.cw_min;
                self.nodes[one].cw = cw_min;
                self.nodes[one].counter = Some(self.draw(cw_min));
                end
            } else {
                // A collision: the air busy for the longest PPDU and the response's
                // timeout; every frame stays queued, each window doubles.
                let longest = winners
                    .iter()
                    .map(|&i| {
                        let (rate, bytes) = self.head(i);
                        rate.ppdu_ns(bytes)
                    })
                    .max()
                    .unwrap_or(0);
                let end = start + longest + self.preset.sifs_ns + self.preset.ack_ns;
                for &i in &winners {
                    let cw = (2 * (self.nodes[i].cw + 1) - 1).min(self.preset.cw_max);
                    self.nodes[i].cw = cw;
                    self.nodes[i].counter = Some(self.draw(cw));
                }
                end
            };
            self.air_free = end;
            for n in &mut self.nodes {
                n.armed_at = end;
            }
        }
    }

    /// The rate and PSDU bytes of node `i`'s next single frame (what a collision costs).
    fn head(&self, i: usize) -> (Rate, u64) {
        let to = if i == 0 { self.next_station() } else { 0 };
        let q = if i == 0 { to } else { 0 };
        let head = self.nodes[i]
            .busy
            .or_else(|| self.nodes[i].queues[q].front().map(|(_, b)| *b));
        let bytes = head.map_or(0, |b| u64::from(b + self.preset.mpdu_overhead));
        (self.rate(i, to), bytes)
    }

    /// The rate from node `from` to node `to`: a station's uplink rate, or the access
    /// point's to that station.
    fn rate(&self, from: usize, to: usize) -> Rate {
        if from == 0 {
            self.nodes[to].down
        } else {
            self.nodes[from].up
        }
    }

    /// Stations in turn after station `from` (0: from the first), wrapping round.
    fn after(&self, from: usize) -> impl Iterator<Item = usize> {
        let n = self.nodes.len();
        (1..n).map(move |k| (from + k - 1) % (n - 1) + 1)
    }

    fn ap_backlogged(&self, s: usize) -> bool {
        !self.nodes[0].queues[s].is_empty()
    }

    /// Under airtime fairness, the station whose turn it is: from the one served last on
    /// (it keeps its turn while its deficit lasts), the first backlogged with a deficit
    /// left.
    fn drr_pick(&self) -> Option<usize> {
        self.after(self.last_served.max(1) - 1)
            .find(|&s| self.ap_backlogged(s) && self.nodes[s].deficit > 0)
    }

    /// The station the access point sends to next, by its policy.
    fn next_station(&self) -> usize {
        let first = self
            .after(self.last_served)
            .find(|&s| self.ap_backlogged(s));
        match self.policy {
            Policy::RoundRobin => first.unwrap_or(1),
            Policy::Airtime { .. } => self.drr_pick().or(first).unwrap_or(1),
        }
    }

    /// Node `i`, which won the air at `start`, sends: one frame, or an A-MPDU of what it
    /// has queued for one receiver.
    fn transmit(&mut self, i: usize, start: u64) -> Txop<T> {
        if let (0, Policy::Airtime { quantum_ns, .. }) = (i, self.policy) {
            // A new round of quanta until some backlogged station has a deficit left.
            while self.drr_pick().is_none() {
                for s in 1..self.nodes.len() {
                    if self.ap_backlogged(s) {
                        self.nodes[s].deficit += quantum_ns as i64;
                    }
                }
            }
        }
        let to = if i == 0 { self.next_station() } else { 0 };
        let q = if i == 0 { to } else { 0 };
        let p = self.preset;
        let rate = self.rate(i, to);
        let (k, bytes, frames) = match self.nodes[i].busy {
            Some(packet) => {
                let (k, bytes) = p.fit(&rate, std::iter::repeat_n(packet, usize::MAX));
                (k, bytes, Vec::new())
            }
            None => {
                let queue = &mut self.nodes[i].queues[q];
                let (k, bytes) = p.fit(&rate, queue.iter().map(|(_, b)| *b));
                (k, bytes, queue.drain(..k).map(|(f, _)| f).collect())
            }
        };
        let response = if k > 1 { p.block_ack_ns } else { p.ack_ns };
        let deliver = start + rate.ppdu_ns(bytes);
        let end = deliver + p.sifs_ns + response;
        if i == 0 {
            if let Policy::Airtime { charge, .. } = self.policy {
                let cost = match charge {
                    Charge::Txop => end - self.air_free,
                    Charge::Ppdu => rate.ppdu_ns(bytes) + p.sifs_ns,
                };
                self.nodes[to].deficit -= cost as i64;
            }
            self.last_served = to;
        }
        Txop {
            from: i,
            to,
            frames,
            carried: k,
            start,
            deliver,
            end,
        }
    }
}

/// The throughput each host gets, bits per second of `payload`-byte packets, when
/// `rates.len()` hosts with those rates send saturated on an 802.11b channel:
/// Heusse et al.'s model (every host the same, below the slowest's rate alone; made for
/// one slow host among fast ones), with the contention and collision terms of
/// docs/lab-notes/shared-medium-model.md §1.
pub fn anomaly_model(p: &Preset, rates: &[Rate], payload: u32) -> f64 {
    let times: Vec<f64> = rates
        .iter()
        .map(|r| {
            (p.aifs_ns() + r.ppdu_ns(u64::from(payload + p.mpdu_overhead)) + p.sifs_ns + p.ack_ns)
                as f64
        })
        .collect();
    f64::from(payload) * 8.0 / (p.heusse_round(&times) / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_tcp_flow_pays_both_legs_and_two_senders_contention() {
        // The lab note's §3a by hand: 802.11b, 11 Mbit/s to 1 Mbit/s.
        let b = Preset::B;
        let (fast, slow) = (Rate::dsss(11.0), Rate::dsss(1.0));
        let got = b.tcp_relayed_bps([&fast, &fast], [&slow, &slow], 1448);
        assert!((got / 1e6 - 0.6769).abs() < 0.0005, "{got}");
        // The same flow the other way round crosses the same air, so the same round.
        let back = b.tcp_relayed_bps([&slow, &slow], [&fast, &fast], 1448);
        assert!((back - got).abs() < 1.0, "{back} against {got}");
        // Less than the two hops' TCP-alone air times added: the contention.
        let added = 1.0
            / (1.0 / b.tcp_alone_bps(&fast, &fast, 1448)
                + 1.0 / b.tcp_alone_bps(&slow, &slow, 1448));
        assert!(got < 0.95 * added, "{got} against {added}");
    }

    const S: u64 = 1_000_000_000;

    fn ht40_mcs15_sgi() -> Rate {
        Rate::Ofdm {
            bits_per_symbol: 1080,
            symbol_ns: 3_600,
            preamble_ns: 40_000,
        }
    }

    #[test]
    fn a_ppdu_takes_its_preamble_and_its_symbols() {
        let r = ht40_mcs15_sgi();
        // One 1500-byte IP packet (1538-byte MPDU): 12 symbols of 3.6 µs, rounded up to
        // 44 µs, after a 40 µs preamble.
        assert_eq!(r.ppdu_ns(1538), 84_000);
        assert_eq!(r.ppdu_ns(64_846), 1_772_000);
        // 802.11b: 1534 bytes at 11 Mbit/s after 192 µs.
        assert_eq!(Rate::dsss(11.0).ppdu_ns(1534), 192_000 + 1_115_637);
    }

    #[test]
    fn the_anomaly_model_gives_heusses_figures() {
        let model = |mbits: &[f64]| {
            let rates: Vec<Rate> = mbits.iter().map(|&m| Rate::dsss(m)).collect();
            anomaly_model(&Preset::B, &rates, 1500) / 1e6
        };
        assert!((model(&[11.0]) - 6.056).abs() < 0.002, "{}", model(&[11.0]));
        assert!(
            (model(&[11.0, 1.0]) - 0.7677).abs() < 0.0005,
            "{}",
            model(&[11.0, 1.0])
        );
    }

    /// Two saturated stations, `up` Mbit/s each, 200 s: what each delivered, Mbit/s.
    fn saturated_uplinks(up: [f64; 2], seconds: u64) -> [f64; 2] {
        let mut m: Medium<()> = Medium::new(Preset::B, Policy::RoundRobin, 10, 7);
        let s = up.map(|r| m.station(Rate::dsss(r), Rate::dsss(r)));
        let mut got = [0u64; 2];
        for &st in &s {
            m.push(0, st, 0, (), 1500).unwrap();
        }
        while let Some(t) = m.next_due().filter(|&t| t < seconds * S) {
            let mut sent = Vec::new();
            m.poll(t, &mut |tx| sent.push(tx.from));
            for from in sent {
                let i = s.iter().position(|&x| x == from).unwrap();
                got[i] += 1;
                // Saturated: another frame is always there.
                let _ = m.push(t, from, 0, (), 1500);
            }
        }
        got.map(|n| n as f64 * 1500.0 * 8.0 / seconds as f64 / 1e6)
    }

    #[test]
    fn a_slow_station_slows_the_fast_one_as_heusse_found() {
        let [fast, slow] = saturated_uplinks([11.0, 1.0], 200);
        let model = anomaly_model(&Preset::B, &[Rate::dsss(11.0), Rate::dsss(1.0)], 1500) / 1e6;
        for got in [fast, slow] {
            assert!(
                (got - model).abs() <= 0.03 * model,
                "{fast} {slow} against {model}"
            );
        }
        // Alone at 11 Mbit/s: 6.06.
        let mut m: Medium<()> = Medium::new(Preset::B, Policy::RoundRobin, 10, 3);
        let st = m.station(Rate::dsss(11.0), Rate::dsss(11.0));
        m.push(0, st, 0, (), 1500).unwrap();
        let mut n = 0u64;
        while let Some(t) = m.next_due().filter(|&t| t < 100 * S) {
            m.poll(t, &mut |_| n += 1);
            let _ = m.push(t, st, 0, (), 1500);
        }
        let alone = n as f64 * 12_000.0 / 100.0 / 1e6;
        assert!((alone - 6.056).abs() < 0.03 * 6.056, "{alone}");
    }

    #[test]
    fn new_rates_make_the_next_transmissions_and_not_one_begun() {
        let mut m: Medium<()> = Medium::new(Preset::B, Policy::RoundRobin, 10, 5);
        let st = m.station(Rate::dsss(1.0), Rate::dsss(1.0));
        m.push(0, st, 0, (), 1500).unwrap();
        m.push(0, st, 0, (), 1500).unwrap();
        let mut air = Vec::new();
        let first = m.next_due().unwrap();
        m.poll(first, &mut |tx| air.push(tx.deliver - tx.start));
        // Changed once the first is on the air: it keeps its 1 Mbit/s PPDU.
        m.set_rates(st, Rate::dsss(11.0), Rate::dsss(11.0));
        let second = m.next_due().unwrap();
        m.poll(second, &mut |tx| air.push(tx.deliver - tx.start));
        assert_eq!(
            air,
            [
                Rate::dsss(1.0).ppdu_ns(1534),
                Rate::dsss(11.0).ppdu_ns(1534)
            ]
        );
        // The access point's rates are no station's.
        m.set_rates(0, Rate::dsss(2.0), Rate::dsss(2.0));
        m.set_rates(9, Rate::dsss(2.0), Rate::dsss(2.0));
    }

    /// The access point alone sends to two saturated stations at 11 and 1 Mbit/s for
    /// 200 s under `policy`: what each got, Mbit/s.
    fn downlink(policy: Policy) -> [f64; 2] {
        let mut m: Medium<()> = Medium::new(Preset::B, policy, 10, 11);
        let s = [11.0, 1.0].map(|r| m.station(Rate::dsss(r), Rate::dsss(r)));
        for &st in &s {
            for _ in 0..5 {
                m.push(0, 0, st, (), 1500).unwrap();
            }
        }
        let mut got = [0u64; 2];
        while let Some(t) = m.next_due().filter(|&t| t < 200 * S) {
            let mut sent = Vec::new();
            m.poll(t, &mut |tx| sent.push(tx.to));
            for to in sent {
                got[s.iter().position(|&x| x == to).unwrap()] += 1;
                let _ = m.push(t, 0, to, (), 1500);
            }
        }
        got.map(|n| n as f64 * 12_000.0 / 200.0 / 1e6)
    }

    #[test]
    fn the_access_point_shares_by_frames_or_by_airtime() {
        let near = |got: f64, want: f64| (got - want).abs() <= 0.03 * want;
        let [f, s] = downlink(Policy::RoundRobin);
        assert!(near(f, 0.794) && near(s, 0.794), "round robin: {f} {s}");
        let [f, s] = downlink(Policy::Airtime {
            quantum_ns: 256_000,
            charge: Charge::Txop,
        });
        assert!(
            near(f, 3.028) && near(s, 0.457),
            "airtime, TXOP charged: {f} {s}"
        );
        let [f, s] = downlink(Policy::Airtime {
            quantum_ns: 256_000,
            charge: Charge::Ppdu,
        });
        assert!(
            near(f, 3.562) && near(s, 0.376),
            "airtime, PPDU charged: {f} {s}"
        );
    }

    /// One station sending (up) or receiving (down) saturated at `rate` on 802.11g for
    /// 100 s beside `busy` busy stations at 24 Mbit/s under `policy`: what it got, and
    /// what one busy station carried, Mbit/s of 1500-byte packets.
    fn beside_busy(rate: u64, busy: usize, up: bool, policy: Policy) -> (f64, f64) {
        let g = Preset::G;
        let mut m: Medium<()> = Medium::new(g, policy, 10, 3);
        let st = m.station(g.rate(rate), g.rate(rate));
        let others: Vec<usize> = (0..busy)
            .map(|_| m.busy_station(g.rate(24_000_000), 1500))
            .collect();
        let (from, to) = if up { (st, 0) } else { (0, st) };
        m.push(0, from, to, (), 1500).unwrap();
        let (mut got, mut theirs) = (0usize, 0usize);
        while let Some(t) = m.next_due().filter(|&t| t < 100 * S) {
            let mut sent = Vec::new();
            m.poll(t, &mut |tx| {
                sent.push((tx.from, tx.frames.len(), tx.carried))
            });
            for (who, frames, carried) in sent {
                if who == others.first().copied().unwrap_or(usize::MAX) {
                    assert_eq!(frames, 0, "a busy station hands out no frames");
                    theirs += carried;
                } else if who == from {
                    got += frames;
                    let _ = m.push(t, from, to, (), 1500);
                }
            }
        }
        let mbit = |n: usize| n as f64 * 12_000.0 / 100.0 / 1e6;
        (mbit(got), mbit(theirs))
    }

    /// The lab note's §1a table: n busy stations at 24 Mbit/s on 802.11g for 50 s, all
    /// they carried against Bianchi's round (`busy_shares`), within 3 % for 2 to 32
    /// (`cargo test -p flowlab-net bianchi -- --nocapture` prints the table).
    #[test]
    fn bianchis_round_follows_the_simulation_as_senders_multiply() {
        let g = Preset::G;
        let r = g.rate(24_000_000);
        for n in [2usize, 4, 8, 16, 32] {
            let mut m: Medium<()> = Medium::new(g, Policy::RoundRobin, 10, 3);
            for _ in 0..n {
                m.busy_station(r, 1500);
            }
            let mut carried = 0;
            while let Some(t) = m.next_due().filter(|&t| t < 50 * S) {
                m.poll(t, &mut |tx| carried += tx.carried);
            }
            let simulated = carried as f64 * 12_000.0 / 50.0 / 1e6;
            let bianchi = g.busy_shares(&vec![r; n], 1500).iter().sum::<f64>() / 1e6;
            let heusse = 1500.0 * 8.0 * n as f64
                / (g.heusse_round(&vec![g.busy_times(&[r])[0]; n]) / 1e9)
                / 1e6;
            eprintln!("| {n} | {simulated:.3} | {heusse:.3} | {bianchi:.3} |");
            assert!(
                (simulated - bianchi).abs() <= 0.03 * bianchi,
                "{n}: {simulated} against {bianchi}"
            );
        }
    }

    /// docs/net.md's figures: on 802.11g a station at 54 Mbit/s sends a 100-byte packet
    /// every 7 ms for 100 s among busy stations at 24 Mbit/s; how long each waited
    /// from its arrival to its PPDU's end, mean and 95th percentile, µs (`cargo test -p
    /// flowlab-net among_busy -- --nocapture` prints them). Its waits grow far faster
    /// than the busy stations' count: a station that collides doubles its window while
    /// they, back at theirs after each success, keep winning.
    #[test]
    fn a_packet_among_busy_stations_waits_as_backoff_decides() {
        let g = Preset::G;
        let waits = |busy: usize| {
            let mut m: Medium<u64> = Medium::new(g, Policy::RoundRobin, 10, 3);
            let st = m.station(g.rate(54_000_000), g.rate(54_000_000));
            for _ in 0..busy {
                m.busy_station(g.rate(24_000_000), 1500);
            }
            let (mut next, mut waited) = (1_000_000u64, Vec::new());
            while next < 100 * S {
                match m.next_due() {
                    Some(due) if due < next => m.poll(due, &mut |tx| {
                        waited.extend(tx.frames.iter().map(|f| tx.deliver - f))
                    }),
                    _ => {
                        // A full queue refuses it, as the emulator's would.
                        let _ = m.push(next, st, 0, next, 100);
                        next += 7_000_003;
                    }
                }
            }
            waited.sort_unstable();
            let mean = waited.iter().sum::<u64>() as f64 / waited.len() as f64 / 1e3;
            let p95 = waited[waited.len() * 95 / 100] as f64 / 1e3;
            eprintln!("{busy} busy: mean {mean:.0} µs, 95th percentile {p95:.0} µs");
            (mean, p95)
        };
        let (alone, _) = waits(0);
        let (one, _) = waits(1);
        let (eight, eight_p95) = waits(8);
        // Alone: an AIFS, a mean backoff and its PPDU.
        assert!(
            (alone - g.latency_ns(&g.rate(54_000_000), 100) as f64 / 1e3).abs() < 10.0,
            "{alone}"
        );
        assert!(one > alone && eight > 10.0 * one, "{one} {eight}");
        assert!(eight_p95 > 2.0 * eight, "{eight_p95} {eight}");
    }

    #[test]
    fn busy_stations_take_their_turns_as_the_model_says() {
        let g = Preset::G;
        let near = |got: f64, want: f64| (got - want).abs() <= 0.03 * want;
        let (fast, busy24) = (g.rate(54_000_000), g.rate(24_000_000));
        for n in [1, 3, 8] {
            let others = vec![busy24; n];
            // Uplink: one of n + 1 senders, each a transmission a round.
            let mut all = vec![fast];
            all.extend(&others);
            let want = g.busy_shares(&all, 1500);
            let (got, theirs) = beside_busy(54_000_000, n, true, Policy::RoundRobin);
            assert!(
                near(got, want[0] / 1e6) && near(theirs, want[1] / 1e6),
                "{n} busy, up: {got} and {theirs} against {want:?}"
            );
            // Downlink: the access point is one of the n + 1 senders.
            let want = g.round_robin_shares(&[fast], 1500, &others)[0] / 1e6;
            let (got, _) = beside_busy(54_000_000, n, false, Policy::RoundRobin);
            assert!(near(got, want), "{n} busy, down: {got} against {want}");
            // Airtime fairness changes nothing with one station to send to.
            let airtime = Policy::Airtime {
                quantum_ns: 256_000,
                charge: Charge::Ppdu,
            };
            let want = g.airtime_shares_among(&[fast], 1500, &others)[0] / 1e6;
            let (got, _) = beside_busy(54_000_000, n, false, airtime);
            assert!(
                near(got, want),
                "{n} busy, down by air time: {got} against {want}"
            );
        }
        // Without busy stations the new figures are the old ones.
        assert_eq!(
            g.round_robin_shares(&[fast], 1500, &[])[0].round(),
            g.alone_bps(&fast, 1500).round()
        );
        // Each busy station costs a TCP flow its turns.
        let tcp: Vec<f64> = [0, 1, 4]
            .iter()
            .map(|&n| g.tcp_among_bps(&fast, &fast, 1448, &vec![busy24; n]))
            .collect();
        assert!(tcp[0] > tcp[1] && tcp[1] > tcp[2], "{tcp:?}");
    }

    #[test]
    fn an_a_mpdu_carries_what_is_queued_for_one_receiver_within_its_limits() {
        let mut m: Medium<u32> = Medium::new(Preset::N, Policy::RoundRobin, 1000, 5);
        let st = m.station(ht40_mcs15_sgi(), ht40_mcs15_sgi());
        for i in 0..100 {
            m.push(0, st, 0, i, 1500).unwrap();
        }
        let mut txops = Vec::new();
        while let Some(t) = m.next_due() {
            m.poll(t, &mut |tx| txops.push(tx));
        }
        // 42 frames of 1544 bytes fit 65 535 bytes; the rest follow in order.
        let sizes: Vec<usize> = txops.iter().map(|t| t.frames.len()).collect();
        assert_eq!(sizes, [42, 42, 16]);
        assert_eq!(txops[0].frames[..3], [0, 1, 2]);
        assert_eq!(txops[0].deliver - txops[0].start, 1_772_000);
        // A Block Ack after an A-MPDU: SIFS 16 + 32 µs.
        assert_eq!(txops[0].end - txops[0].deliver, 48_000);
        // Each begins after the previous one's end, an AIFS and a backoff.
        for w in txops.windows(2) {
            assert!(w[1].start >= w[0].end + Preset::N.aifs_ns());
        }
    }

    #[test]
    fn the_expected_rates_follow_the_timings() {
        let b = Preset::B;
        // Alone at 11 Mbit/s: 1500 bytes take 50 + 310 (mean backoff) + 192 + 1115.6
        // + 10 + 304 µs: Heusse's 6.056 Mbit/s.
        let alone = b.alone_bps(&b.rate(11_000_000), 1500) / 1e6;
        assert!((alone - 6.056).abs() < 0.002, "{alone}");
        // Busy together, each gets the same: Bianchi's round, the lab note's §1a
        // figure, which two senders put within 0.1 % of the anomaly model's.
        let shares = b.busy_shares(&[b.rate(11_000_000), b.rate(1_000_000)], 1500);
        let model = anomaly_model(&b, &[Rate::dsss(11.0), Rate::dsss(1.0)], 1500);
        for s in &shares {
            assert!((s / 1e6 - 0.76892).abs() < 0.00001, "{shares:?}");
            assert!(
                (s - model).abs() < 0.001 * model,
                "{shares:?} against {model}"
            );
        }
        // 802.11n at 300 Mbit/s: 42 segments in 1772 µs, a Block Ack, and the 21
        // acknowledgements in a 96 µs A-MPDU of their own, two AIFS and one shared
        // backoff (7.5 slots × 17/16): 42 × 1448 × 8 bits in 2 × 34 + 71.72 + 1820 +
        // 144 µs.
        let n = Preset::N;
        assert_eq!(n.rate(300_000_000), ht40_mcs15_sgi());
        let tcp = n.tcp_alone_bps(&n.rate(300_000_000), &n.rate(300_000_000), 1448) / 1e6;
        assert!((tcp - 231.27).abs() < 0.01, "{tcp}");
        // Air time charged equally: the lab note's 3.562 and 0.376 Mbit/s.
        let shares = b.airtime_shares(&[b.rate(11_000_000), b.rate(1_000_000)], 1500);
        assert!((shares[0] / 1e6 - 3.562).abs() < 0.002, "{shares:?}");
        assert!((shares[1] / 1e6 - 0.376).abs() < 0.001, "{shares:?}");
        // Every preset is found by its name, and builds rates of its kind.
        for p in Preset::ALL {
            assert_eq!(Preset::named(p.name), Some(p));
        }
        assert_eq!(
            Preset::A.rate(54_000_000),
            Rate::Ofdm {
                bits_per_symbol: 216,
                symbol_ns: 4_000,
                preamble_ns: 20_000
            }
        );
    }
}
