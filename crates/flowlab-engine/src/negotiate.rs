//! What both ends of a test agree its data streams do, from the parameters that crossed
//! the wire: the client with the features the server's hello offered, the server with
//! what the client asked for. One function for both ends, so that they cannot drift
//! apart (a sender keeping within a window its receiver never reports, say).

use std::time::Duration;

use flowlab_proto::hello::feature;
use flowlab_proto::params::{Mode, Protocol, TestParams};

use crate::stream::{DataConfig, burst_bytes};
use crate::trace;
use crate::udp_data::MAX_GSO_BYTES;

/// Which end builds the configuration, with what only that end knows.
#[derive(Debug, Clone, Copy)]
pub enum End<'a> {
    /// The client: the features the server's hello offered (none from a stock iperf3
    /// server), and the CPU its own streams run on (`-A`).
    Client {
        features: &'a [String],
        affinity: Option<usize>,
    },
    /// The server: what the client asked for is what it does.
    Server,
}

/// A test's block: the length asked for, or iperf3's default when the client leaves it
/// to the server (0).
pub fn block_len(p: &TestParams, proto: Protocol) -> usize {
    match (p.len, proto) {
        (0, Protocol::Tcp) => flowlab_results::spec::DEFAULT_TCP_LEN,
        (0, Protocol::Udp) => flowlab_results::spec::DEFAULT_UDP_LEN,
        (l, _) => l as usize,
    }
}

/// How `params`' data streams run at `end`.
pub fn data_config(params: &TestParams, proto: Protocol, end: End<'_>) -> DataConfig {
    let ext = params.flowlab.as_ref();
    let mode = ext.map_or(Mode::Streaming, |f| f.mode);
    let streaming = mode == Mode::Streaming;
    // What the server offers: a server offers what it runs; a flowlab client's server
    // says so in its hello.
    let offers = |f: &str| match end {
        End::Client { features, .. } => features.iter().any(|x| x == f),
        End::Server => true,
    };
    // A flowlab peer closes its side of a TCP stream when done, so the receiver reads
    // on to end-of-file; a stock iperf3 client blocks reading until the server's
    // streams close, so a server always closes them.
    let flowlab_peer = match end {
        End::Client { .. } => offers(feature::CLEAN_CLOSE),
        End::Server => ext.is_some_and(|f| f.version >= 1),
    };
    let len = block_len(params, proto);
    DataConfig {
        mode,
        len,
        rate_bps: params.bandwidth,
        counters_64bit: params.udp_counters_64bit,
        rto: ext
            .and_then(|f| f.rto_ms)
            .map_or(Duration::from_secs(1), Duration::from_millis),
        zerocopy: params.zerocopy,
        close_when_done: matches!(end, End::Server) || flowlab_peer,
        drain_to_eof: flowlab_peer,
        // The backoff only at unlimited rate.
        backoff: streaming
            && params.bandwidth == 0
            && ext.is_some_and(|f| f.udp_backoff)
            && offers(feature::UDP_BACKOFF),
        // A paced test's window needs a server that reports in paced tests too: one
        // that offers only `udp-window` would leave the sender waiting for reports.
        window: streaming
            && ext.is_some_and(|f| f.udp_window)
            && offers(feature::UDP_WINDOW)
            && (params.bandwidth == 0 || offers(feature::UDP_WINDOW_PACED)),
        // Set from the control connection when the test starts.
        path_rtt: None,
        trace: ext
            .and_then(|f| f.trace_us)
            .filter(|_| proto == Protocol::Tcp)
            .map(|us| Duration::from_micros(us).clamp(trace::MIN_PERIOD, trace::MAX_PERIOD)),
        affinity: match end {
            End::Client { affinity, .. } => affinity,
            End::Server => params.server_affinity.map(|c| c as usize),
        },
        fq_rate_bps: params.fq_rate,
        repeating_payload: params.repeating_payload,
        burst_bytes: burst_bytes(params.bandwidth, len, params.burst, params.pacing_timer),
        file: None,
        skip_rx_copy: params.skip_rx_copy,
        // Both offloads on unless the client said no (iperf3 3.21 without `--gsro`):
        // the datagrams on the wire are the same either way, not the CPU they cost.
        gso_bytes: match (params.gso, params.gso_bf_size) {
            (Some(false), _) => 0,
            (_, 0) => MAX_GSO_BYTES,
            (_, bytes) => usize::try_from(bytes).map_or(MAX_GSO_BYTES, |b| b.min(MAX_GSO_BYTES)),
        },
        gro: params.gro != Some(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_results::spec::{TestSpec, Transport};

    /// What the two ends must agree on.
    fn agreed(c: &DataConfig) -> impl PartialEq + std::fmt::Debug {
        let what = (c.mode, c.len, c.rate_bps, c.counters_64bit, c.rto);
        let how = (
            c.backoff,
            c.window,
            c.trace,
            c.drain_to_eof,
            c.close_when_done,
        );
        (
            what,
            how,
            (
                c.zerocopy,
                c.fq_rate_bps,
                c.burst_bytes,
                c.repeating_payload,
            ),
        )
    }

    /// Against a server of this build (every feature offered), a client and the server
    /// reading its parameters run the same streams, whatever the test.
    #[test]
    fn a_client_and_a_current_server_agree() {
        let features: Vec<String> = [
            feature::STOP_AND_WAIT,
            feature::CLEAN_CLOSE,
            feature::UDP_BACKOFF,
            feature::UDP_WINDOW,
            feature::UDP_WINDOW_PACED,
            feature::TRACE,
        ]
        .map(String::from)
        .to_vec();
        let tcp = TestSpec::new("h");
        let mut traced = tcp.clone();
        traced.trace = Some(Duration::from_millis(5));
        let mut udp = tcp.clone();
        udp.protocol = Transport::Udp;
        udp.len = 1460;
        let mut paced = udp.clone();
        paced.bitrate = 100_000_000;
        paced.burst = 4;
        let mut stop_and_wait = udp.clone();
        stop_and_wait.mode = Mode::StopAndWait;
        stop_and_wait.rto = Duration::from_millis(250);
        for spec in [tcp, traced, udp, paced, stop_and_wait] {
            let params = spec.to_params();
            let client = End::Client {
                features: &features,
                affinity: None,
            };
            let proto = spec.protocol.wire().expect("TCP or UDP");
            let c = data_config(&params, proto, client);
            let s = data_config(&params, proto, End::Server);
            assert_eq!(agreed(&c), agreed(&s), "{spec:?}");
        }
    }

    /// Against a stock iperf3 server (no hello, no features) a client uses none of
    /// flowlab's extensions, and stops reading after a quiet gap.
    #[test]
    fn a_client_of_a_stock_server_uses_no_extension() {
        let mut spec = TestSpec::new("h");
        spec.protocol = Transport::Udp;
        spec.len = 1460;
        let client = End::Client {
            features: &[],
            affinity: Some(1),
        };
        let c = data_config(&spec.to_params(), Protocol::Udp, client);
        assert!(!c.backoff && !c.window && !c.drain_to_eof && !c.close_when_done);
        assert_eq!(c.affinity, Some(1));
    }
}
