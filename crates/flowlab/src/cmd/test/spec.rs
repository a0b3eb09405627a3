//! `flowlab test`'s arguments validated into a [`TestSpec`]: the combinations refused,
//! the engine's spec built.

use std::time::Duration;

use flowlab_engine::trace;
use flowlab_proto::params::{MAX_PARALLEL, Mode};
use flowlab_results::spec::{self, Amount, Direction, TestSpec, Transport};
use flowlab_results::units;

use super::args::{Args, MAX_TIME};
use crate::usage::Usage;

impl Args {
    /// Validates the combination and builds the engine's spec.
    pub fn to_spec(&self) -> Result<TestSpec, Usage> {
        let protocol = match (self.udp, self.quic) {
            (true, _) => Transport::Udp,
            (_, true) => Transport::Quic,
            _ => Transport::Tcp,
        };
        if self.quic {
            self.quic_refusals()?;
        }
        if self.mptcp {
            self.mptcp_refusals()?;
        }
        if !self.receivers.is_empty() {
            self.multicast_refusals()?;
        }
        let host = self.host.clone().or_else(|| self.client.clone());
        let host = host.ok_or("a server to test against: flowlab test HOST")?;
        // iperf3's HOST%DEV: the host, and the device to bind to.
        let (host, host_dev) = match host.split_once('%') {
            Some((h, dev)) if !h.is_empty() && !dev.is_empty() => (h.to_string(), Some(dev)),
            Some(_) => return Err(Usage(format!("{host}: give HOST%DEV, as iperf3 takes it"))),
            None => (host.clone(), None),
        };
        let mut s = TestSpec::new(host);
        let (bind, bind_dev) =
            crate::cmd::bind_and_device(host_dev, self.bind.as_deref(), self.bind_dev.as_deref())?;
        s.bind = bind;
        s.bind_dev = bind_dev;
        if self.cport == Some(0) {
            return Err("--cport must be 1 to 65535 (leave it out for any port)".into());
        }
        s.cport = self.cport.unwrap_or(0);
        for (ms, flag) in [
            (self.snd_timeout, "--snd-timeout"),
            (self.rcv_timeout, "--rcv-timeout"),
        ] {
            if let Some(ms) = ms.filter(|ms| !(1..=86_400_000).contains(ms)) {
                return Err(Usage(format!(
                    "{flag} {ms} must be 1 to 86400000 ms (a day)"
                )));
            }
        }
        s.snd_timeout = self.snd_timeout.map(Duration::from_millis);
        s.rcv_timeout = self.rcv_timeout.map(Duration::from_millis);
        s.port = self.port.unwrap_or(if self.quic {
            flowlab_proto::quic_perf::DEFAULT_PORT
        } else {
            flowlab_proto::DEFAULT_PORT
        });
        s.multicast = self.multicast(&s)?;
        s.quic_connection_each = self.quic_connections;
        s.mptcp = self.mptcp;
        s.protocol = protocol;
        s.mode = if self.stop_and_wait {
            Mode::StopAndWait
        } else {
            Mode::Streaming
        };
        s.len = match (self.length, protocol) {
            (Some(l), Transport::Udp) if !(16..=spec::MAX_UDP_LEN as u64).contains(&l) => {
                return Err(Usage(format!(
                    "-l/--length {l} is outside 16..={} for UDP",
                    spec::MAX_UDP_LEN
                )));
            }
            (Some(l), Transport::Tcp) if !(1..=16 << 20).contains(&l) => {
                return Err(Usage(format!("-l/--length {l} is outside 1..=16M for TCP")));
            }
            (Some(l), _) => l as usize,
            (None, Transport::Tcp | Transport::Quic) => spec::DEFAULT_TCP_LEN,
            (None, Transport::Udp) => spec::DEFAULT_UDP_LEN,
        };
        s.amount = match (&self.time, self.bytes, self.blocks) {
            (Some(t), _, _) => {
                let t = crate::usage::seconds("-t/--time", t, false, MAX_TIME)?;
                Amount::Seconds(t.as_secs_f64())
            }
            (_, Some(0), _) => return Err("-n/--bytes must be more than 0".into()),
            (_, Some(n), _) => Amount::Bytes(n),
            (_, _, Some(0)) => return Err("-k/--blockcount must be more than 0".into()),
            (_, _, Some(k)) => Amount::Blocks(k),
            _ => Amount::Seconds(10.0),
        };
        if !(self.interval == 0.0 || (0.1..=3600.0).contains(&self.interval)) {
            return Err(Usage(format!(
                "-i/--interval {} must be 0 (none) or between 0.1 and 3600 seconds",
                self.interval
            )));
        }
        s.interval = (self.interval > 0.0).then(|| Duration::from_secs_f64(self.interval));
        if !(1..=MAX_PARALLEL).contains(&u64::from(self.parallel)) {
            return Err(Usage(format!(
                "-P/--parallel {} must be between 1 and {MAX_PARALLEL}",
                self.parallel
            )));
        }
        s.parallel = self.parallel;
        let streams = u32::from(s.cport) + self.parallel * if self.bidir { 2 } else { 1 } - 1;
        if s.cport > 0 && streams > 65_535 {
            return Err(Usage(format!(
                "--cport {}: the last of the streams would need port {streams}, above 65535",
                s.cport
            )));
        }
        s.direction = match (self.reverse, self.bidir) {
            (true, _) => Direction::Reverse,
            (_, true) => Direction::Bidir,
            _ => Direction::Forward,
        };
        s.bitrate = self.bitrate.map_or(0, |b| b.bps);
        if s.multicast.is_some() && self.bitrate.is_none() {
            // A group's sender hears nothing from its receivers, so cannot back off:
            // unpaced, it would flood every link to them. iperf3's UDP default.
            s.bitrate = MULTICAST_BITRATE;
        }
        s.burst = self.bitrate.map_or(0, |b| b.burst);
        if s.burst > 0 && s.bitrate == 0 {
            return Err("-b/--bitrate 0/N: a burst needs a rate to pace".into());
        }
        if let Some(us) = self.pacing_timer {
            if !(1..=1_000_000).contains(&us) {
                return Err(Usage(format!(
                    "--pacing-timer {us} must be 1 to 1000000 microseconds"
                )));
            }
            s.pacing_timer_us = Some(us);
        }
        s.tos = self.tos.or(self.dscp.map(|d| d << 2)).unwrap_or(0);
        s.family = self.family.family();
        if self.omit > 600 {
            return Err("-O/--omit is limited to 600 seconds".into());
        }
        s.omit = self.omit;
        if self.connect_timeout == 0 {
            return Err("--connect-timeout must be at least 1 ms".into());
        }
        s.connect_timeout = Duration::from_millis(self.connect_timeout);
        if let Some(rto) = self.rto {
            if rto == 0 {
                return Err("--rto must be at least 1 ms".into());
            }
            if !(self.stop_and_wait && self.udp) {
                return Err("--rto applies only to UDP stop-and-wait (-u --stop-and-wait)".into());
            }
            s.rto = Duration::from_millis(rto);
        }
        let udp_streaming = self.udp && !self.stop_and_wait;
        if self.no_backoff && !(udp_streaming && s.bitrate == 0) {
            return Err(Usage(
                "--no-backoff applies only to UDP at unlimited rate (-u, no -b or -b 0)".into(),
            ));
        }
        if self.no_window && !udp_streaming {
            return Err(Usage(
                "--no-window applies only to UDP streaming (-u, not --stop-and-wait)".into(),
            ));
        }
        s.udp_backoff = !self.no_backoff;
        s.udp_window = !self.no_window;
        let trace = match (&self.trace, &self.trace_csv) {
            (Some(p), _) => Some(p.as_str()),
            (None, Some(_)) => Some("10ms"),
            (None, None) => None,
        };
        if let Some(p) = trace {
            let period = units::parse_duration(p).map_err(|e| Usage(format!("--trace: {e}")))?;
            if !(trace::MIN_PERIOD..=trace::MAX_PERIOD).contains(&period) {
                return Err(Usage(format!(
                    "--trace period {p} must be between 1ms and 1s"
                )));
            }
            s.trace = Some(period);
        }
        if let Some(i) = &self.latency {
            let interval =
                units::parse_duration(i).map_err(|e| Usage(format!("--latency: {e}")))?;
            if !(Duration::from_millis(1)..=Duration::from_secs(1)).contains(&interval) {
                return Err(Usage(format!(
                    "--latency interval {i} must be between 1ms and 1s"
                )));
            }
            s.latency = Some(interval);
        }
        for (w, flag) in [
            (self.window, "-w/--window"),
            (self.recv_window, "--recv-window"),
        ] {
            if let Some(w) = w.filter(|&w| w > spec::MAX_WINDOW) {
                return Err(Usage(format!(
                    "{flag} {w} bytes is above the largest socket buffer the kernel takes, \
                     {} bytes (2 GiB − 1); the kernel also caps it at net.core.rmem_max/wmem_max",
                    spec::MAX_WINDOW
                )));
            }
        }
        if let Some(w) = self.recv_window {
            if w == 0 {
                return Err("--recv-window must be more than 0".into());
            }
            s.recv_window = w;
        }
        s.recv_congestion = self.recv_congestion.clone();
        if let Some(a) = &self.affinity {
            s.affinity = affinity(a, &flowlab_engine::cpu::allowed_cpus())?;
        }
        let tcp_only = [
            (self.congestion.is_some(), "-C/--congestion"),
            (self.mss.is_some(), "-M/--set-mss"),
            (self.no_delay, "-N/--no-delay"),
            (self.zerocopy, "-Z/--zerocopy"),
            (self.trace.is_some(), "--trace"),
            (self.trace_csv.is_some(), "--trace-csv"),
            (self.recv_window.is_some(), "--recv-window"),
            (self.recv_congestion.is_some(), "--recv-congestion"),
            (self.snd_timeout.is_some(), "--snd-timeout"),
        ];
        if let Some((_, flag)) = tcp_only.iter().find(|(set, _)| *set && self.udp) {
            return Err(Usage(format!("{flag} applies to TCP only; drop it or -u")));
        }
        if let (true, Some(c)) = (self.quic, &self.congestion) {
            if flowlab_quic::client::Congestion::parse(c).is_none() {
                return Err(Usage(format!(
                    "-C/--congestion {c}: QUIC's are cubic, reno and bbr (the stack's own)"
                )));
            }
        }
        if self.zerocopy && self.stop_and_wait {
            return Err("-Z/--zerocopy cannot be combined with --stop-and-wait".into());
        }
        if let Some(m) = self.mss {
            if !(88..=65_535).contains(&m) {
                return Err(Usage(format!(
                    "-M/--set-mss {m} must be between 88 and 65535"
                )));
            }
            s.mss = m;
        }
        s.credentials = self.credentials.credentials()?;
        if let Some(extra) = &self.extra_data {
            if extra.len() > 1024 {
                return Err(Usage(format!(
                    "--extra-data is {} bytes; at most 1024",
                    extra.len()
                )));
            }
            s.extra_data = Some(extra.clone());
        }
        if self.dont_fragment && !self.udp {
            return Err("--dont-fragment applies to UDP only (-u); TCP sets it itself".into());
        }
        s.dont_fragment = self.dont_fragment;
        s.get_server_output = self.get_server_output;
        s.repeating_payload = self.repeating_payload;
        s.skip_rx_copy = self.skip_rx_copy;
        if let Some(ka) = &self.cntl_ka {
            flowlab_engine::sock::check_keepalive(ka).map_err(|e| Usage(e.to_string()))?;
        }
        s.control_keepalive = self.cntl_ka;
        s.fq_rate = self.fq_rate.unwrap_or(0);
        if let Some(path) = &self.file {
            self.file_test(&mut s, path)?;
        }
        s.flowlabel = self.flowlabel.unwrap_or(0);
        s.congestion = self.congestion.clone();
        s.window = self.window.unwrap_or(0);
        s.nodelay = self.no_delay;
        s.zerocopy = self.zerocopy;
        s.title = self.title.clone();
        Ok(s)
    }
}

/// A multicast test's rate when `-b` gives none, bit/s.
const MULTICAST_BITRATE: u64 = 1_000_000;

/// The first option set among `refused` (set, flag, why), refused as `FLAG with MODE: WHY`.
fn first_refused(refused: &[(bool, &str, &str)], mode: &str) -> Result<(), Usage> {
    match refused.iter().find(|(set, ..)| *set) {
        Some((_, flag, why)) => Err(Usage(format!("{flag} with {mode}: {why}"))),
        None => Ok(()),
    }
}

impl Args {
    /// What a QUIC test cannot do: the options of TCP's and UDP's sockets, of iperf3's
    /// control protocol (which a perf server does not speak) and of flowlab's
    /// extensions to it.
    fn quic_refusals(&self) -> Result<(), Usage> {
        let refused = [
            (self.blocks.is_some(), "-k/--blockcount", "give -n or -t"),
            (
                self.length.is_some(),
                "-l/--length",
                "the stack sizes its packets",
            ),
            (
                self.bitrate.is_some(),
                "-b/--bitrate",
                "a perf stream is not paced",
            ),
            (self.omit > 0, "-O/--omit", "not yet"),
            (
                self.window.is_some(),
                "-w/--window",
                "the stack sets its windows",
            ),
            (
                self.recv_window.is_some(),
                "--recv-window",
                "the stack sets its windows",
            ),
            (
                self.recv_congestion.is_some(),
                "--recv-congestion",
                "the server picks its own",
            ),
            (
                self.mss.is_some(),
                "-M/--set-mss",
                "the stack finds the path's MTU",
            ),
            (self.no_delay, "-N/--no-delay", "TCP only"),
            (self.zerocopy, "-Z/--zerocopy", "TCP only"),
            (self.fq_rate.is_some(), "--fq-rate", "TCP and UDP only"),
            (self.snd_timeout.is_some(), "--snd-timeout", "TCP only"),
            (
                self.rcv_timeout.is_some(),
                "--rcv-timeout",
                "TCP and UDP only",
            ),
            (
                self.skip_rx_copy,
                "--skip-rx-copy",
                "the stack reads every packet",
            ),
            (
                self.cntl_ka.is_some(),
                "--cntl-ka",
                "a perf test has no control connection",
            ),
            (self.file.is_some(), "-F/--file", "TCP only"),
            (self.latency.is_some(), "--latency", "not yet"),
            (
                self.tos.is_some() || self.dscp.is_some(),
                "-S/--dscp",
                "not yet",
            ),
            (self.flowlabel.is_some(), "-L/--flowlabel", "not yet"),
            (
                self.affinity.is_some(),
                "-A/--affinity",
                "the stack's threads are its own",
            ),
            (self.cport.is_some(), "--cport", "not yet"),
            (
                self.bind.is_some() || self.bind_dev.is_some(),
                "-B/--bind-dev",
                "not yet",
            ),
            (
                self.extra_data.is_some(),
                "--extra-data",
                "a perf server takes none",
            ),
            (
                self.get_server_output,
                "--get-server-output",
                "a perf server sends none",
            ),
            (self.repeating_payload, "--repeating-payload", "not yet"),
            (self.stop_and_wait, "--stop-and-wait", "UDP only"),
            (
                self.credentials.username.is_some(),
                "--username",
                "a perf server takes none",
            ),
        ];
        first_refused(&refused, "--quic")
    }

    /// What an MPTCP socket refuses (Linux has no MPTCP form of these options): said
    /// before a test, not as a failed stream.
    fn mptcp_refusals(&self) -> Result<(), Usage> {
        let refused = [
            (
                self.zerocopy,
                "-Z/--zerocopy",
                "an MPTCP socket refuses SO_ZEROCOPY",
            ),
            (
                self.fq_rate.is_some(),
                "--fq-rate",
                "an MPTCP socket refuses SO_MAX_PACING_RATE (-b paces it)",
            ),
            (
                self.snd_timeout.is_some(),
                "--snd-timeout",
                "an MPTCP socket refuses TCP_USER_TIMEOUT",
            ),
        ];
        first_refused(&refused, "-m/--mptcp")
    }

    /// What a multicast test cannot do: it is one UDP stream the client sends to a
    /// group, whose receivers cannot answer its socket.
    fn multicast_refusals(&self) -> Result<(), Usage> {
        let refused = [
            (
                self.reverse || self.bidir,
                "-R/--bidir",
                "the client sends (a server never sends to a group)",
            ),
            (
                self.parallel > 1,
                "-P/--parallel",
                "one stream to the group",
            ),
            (
                self.stop_and_wait,
                "--stop-and-wait",
                "a group does not acknowledge",
            ),
            (self.latency.is_some(), "--latency", "not yet"),
            (self.cport.is_some(), "--cport", "not yet"),
            (
                self.get_server_output,
                "--get-server-output",
                "each receiver's figures are in the result",
            ),
            (
                self.no_window || self.no_backoff,
                "--no-window/--no-backoff",
                "a multicast sender never waits for its receivers",
            ),
        ];
        first_refused(&refused, "--receivers")
    }

    /// `--receivers`, `--ttl` and `--source-specific` for the spec's group (its host,
    /// `s.host`, which must be a multicast address) and port.
    fn multicast(&self, s: &TestSpec) -> Result<Option<spec::MulticastSpec>, Usage> {
        let group = s.host.parse::<std::net::IpAddr>().ok();
        if self.receivers.is_empty() {
            return match group.filter(|g| g.is_multicast()) {
                Some(g) => Err(Usage(format!(
                    "{g} is a multicast group: name the flowlab servers that receive it with                      --receivers HOST,HOST,… (and -u)"
                ))),
                None => Ok(None),
            };
        }
        if !group.is_some_and(|g| g.is_multicast()) {
            return Err(Usage(format!(
                "--receivers: {} must be a multicast group address (224.0.0.0/4 or ff00::/8),                  to which the test is sent",
                s.host
            )));
        }
        let receivers = self
            .receivers
            .iter()
            .map(|r| spec::Receiver::parse(r.trim(), s.port))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Usage(format!("--receivers {e}")))?;
        let ttl = self.ttl.unwrap_or(1);
        if !(1..=255).contains(&ttl) {
            return Err(Usage(format!("--ttl {ttl} must be 1 to 255")));
        }
        Ok(Some(spec::MulticastSpec {
            receivers,
            ttl,
            source_specific: self.source_specific,
        }))
    }

    /// `-F FILE`: what it takes (a TCP test of one stream, one way) and, when the client
    /// sends, the file's size as the amount.
    fn file_test(&self, s: &mut TestSpec, path: &std::path::Path) -> Result<(), Usage> {
        let flag = format!("-F {}", path.display());
        let refusal = [
            (self.udp, "is TCP only (as iperf3's); drop -u"),
            (self.bidir, "goes one way; drop --bidir"),
            (self.parallel > 1, "is one stream; drop -P"),
            (self.zerocopy, "is sent with sendfile(2) already; drop -Z"),
            (self.stop_and_wait, "streams; drop --stop-and-wait"),
            (
                self.skip_rx_copy && self.reverse,
                "-R writes what is received; drop --skip-rx-copy",
            ),
        ];
        if let Some((_, why)) = refusal.iter().find(|(set, _)| *set) {
            return Err(Usage(format!("{flag} {why}")));
        }
        if !self.reverse {
            if self.time.is_some() || self.bytes.is_some() || self.blocks.is_some() {
                return Err(Usage(format!(
                    "{flag}: the file's size is the amount sent; drop -t/-n/-k"
                )));
            }
            let meta = std::fs::metadata(path).map_err(|e| Usage(format!("{flag}: {e}")))?;
            if !meta.is_file() || meta.len() == 0 {
                return Err(Usage(format!("{flag}: not a file with data to send")));
            }
            s.amount = Amount::Bytes(meta.len());
        }
        s.file = Some(path.to_path_buf());
        Ok(())
    }
}

/// `-A N[,M]`: the client's CPU N, which this process must be allowed to run on (`allowed`),
/// and the server's M (the server checks its own).
fn affinity(text: &str, allowed: &[usize]) -> Result<spec::Affinity, Usage> {
    let cpu = |t: &str| {
        t.trim().parse::<usize>().map_err(|_| {
            Usage(format!(
                "-A/--affinity {text}: give a CPU number, or two as N,M (the client's, the server's)"
            ))
        })
    };
    let (client, server) = match text.split_once(',') {
        Some((c, s)) if c.trim().is_empty() => (None, Some(cpu(s)?)),
        Some((c, s)) => (Some(cpu(c)?), Some(cpu(s)?)),
        None => (Some(cpu(text)?), None),
    };
    if let Some(c) = client.filter(|c| !allowed.contains(c)) {
        return Err(Usage(format!(
            "-A/--affinity {text}: this machine runs flowlab on CPUs {}, not {c}",
            flowlab_engine::cpu::cpu_list(allowed)
        )));
    }
    Ok(spec::Affinity { client, server })
}

#[cfg(test)]
mod affinity_tests {
    use super::affinity;
    use flowlab_results::spec::Affinity;

    #[test]
    fn affinity_is_the_clients_cpu_then_the_servers() {
        let all = [0, 1, 2, 3];
        let a = |client, server| Affinity { client, server };
        assert_eq!(affinity("1", &all).unwrap(), a(Some(1), None));
        assert_eq!(affinity("1,0", &all).unwrap(), a(Some(1), Some(0)));
        assert_eq!(affinity(",3", &all).unwrap(), a(None, Some(3)));
        assert_eq!(
            affinity("7", &all).unwrap_err().0,
            "-A/--affinity 7: this machine runs flowlab on CPUs 0-3, not 7"
        );
        for bad in ["x", "1,", "-1", "1,2,3"] {
            let e = affinity(bad, &all).unwrap_err().0;
            assert!(e.contains("give a CPU number"), "{bad}: {e}");
        }
    }
}
