//! What limited a transfer, as data: each direction's verdict, the shares of its time,
//! and the numbers behind it ([`crate::diagnose`] computes it from a trace; what it
//! advises is the formats' `flowlab_report::advice`).

use serde::{Deserialize, Serialize};

use crate::spec::StreamDirection;

/// What held a sender back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    ReceiveWindow,
    SendBuffer,
    Network,
    Application,
}

/// Shares of the traced time, 0…1, summing to 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Shares {
    pub receive_window: f64,
    pub send_buffer: f64,
    pub network: f64,
    pub application: f64,
}

impl Shares {
    /// These shares with the receive window's raised to `share`, the difference taken
    /// from the network's, then the application's (the kernel counts a sender stopped by
    /// pacing or its congestion window while the peer's window is full as either).
    pub(crate) fn with_receive_window(mut self, share: f64) -> Shares {
        let mut more = (share - self.receive_window).max(0.0);
        self.receive_window += more;
        for s in [&mut self.network, &mut self.application] {
            let taken = more.min(*s);
            *s -= taken;
            more -= taken;
        }
        // Nothing left to take from: the send buffer's share was counted from the
        // kernel's own clock and is kept.
        self.receive_window -= more;
        self
    }

    pub(crate) fn of(self, l: Limit) -> f64 {
        match l {
            Limit::ReceiveWindow => self.receive_window,
            Limit::SendBuffer => self.send_buffer,
            Limit::Network => self.network,
            Limit::Application => self.application,
        }
    }

    /// The limits, largest share first.
    pub fn ranked(&self) -> Vec<(Limit, f64)> {
        let mut v: Vec<(Limit, f64)> = [
            Limit::ReceiveWindow,
            Limit::SendBuffer,
            Limit::Network,
            Limit::Application,
        ]
        .into_iter()
        .map(|l| (l, self.of(l)))
        .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

/// The numbers behind a verdict (absent when the kernel did not provide their inputs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Largest bytes in flight seen, and the peer's largest advertised window.
    pub peak_in_flight: Option<u64>,
    pub max_receive_window: Option<u64>,
    /// Samples whose sender was at the peer's window ([`window_full`](crate::diagnose::window_full): what it had sent
    /// filled the window, or its next segment did not fit), of those that show it
    /// (`window_samples`).
    pub window_full_samples: u64,
    #[serde(default)]
    pub window_samples: u64,
    /// Of the window-full samples, those whose window had shrunk to less than half of
    /// the largest the peer advertised in the ten samples before on the stream, and
    /// reopened beyond twice it later on the stream: the peer's buffer held data its
    /// application had not read yet, so the reader, not the buffer's size, was short.
    #[serde(default)]
    pub reader_full_samples: u64,
    /// Highest delivery rate (bytes/s), lowest RTT (µs) and their product (bytes).
    pub delivery_rate: Option<u64>,
    pub min_rtt_us: Option<u64>,
    pub bdp_bytes: Option<u64>,
    /// The path's rate where known (bit/s, [`PathRate`](crate::spec::PathRate)) times the lowest RTT: what a
    /// window must hold to carry that rate (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_rate_bps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bdp_bytes: Option<u64>,
    /// Median smoothed RTT (µs) and its ratio to the lowest RTT.
    pub median_srtt_us: Option<u64>,
    pub rtt_inflation: Option<f64>,
    /// Segments retransmitted over the traced span, and as a share of segments sent.
    pub retransmits: Option<u64>,
    pub retransmit_share: Option<f64>,
    /// Largest send and receive buffers the sending sockets had.
    pub sndbuf: Option<u64>,
}

/// The verdict for one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub direction: StreamDirection,
    /// How the shares were computed.
    pub method: Method,
    pub shares: Shares,
    pub primary: Limit,
    pub evidence: Evidence,
}

/// How a diagnosis's shares were computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    /// The kernel's own accounting: busy, receive-window-limited and
    /// send-buffer-limited time.
    #[serde(rename = "kernel")]
    Kernel,
    /// The same, with the receive-window share raised to the share of samples at the
    /// peer's window, which the kernel's own count missed.
    #[serde(rename = "kernel+samples")]
    KernelAndSamples,
    /// One sample at a time (older kernels).
    #[serde(rename = "samples")]
    Samples,
}
