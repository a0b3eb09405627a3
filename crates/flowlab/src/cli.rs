//! Command-line arguments (clap) and their one-place validation into engine types.
//!
//! Parsing (`Cli`) makes no system calls; `TestArgs::to_spec` and `ServeArgs::to_config`
//! refuse invalid combinations with a message naming the flag, so the rest of the program
//! never sees raw arguments.

use std::net::IpAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use flowlab_engine::server::ServerConfig;
use flowlab_engine::trace;
use flowlab_proto::params::{Mode, Protocol};
use flowlab_report::spec::{self, Amount, Direction, TestSpec};
use flowlab_report::units::{self, UnitFormat};

#[derive(Debug, Parser)]
#[command(
    name = "flowlab",
    version,
    about = "A laboratory for network transfers: throughput, loss, jitter, and why."
)]
pub struct Cli {
    /// More diagnostics on stderr (-v, -vv).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve throughput tests to flowlab and iperf3 clients, many at once.
    Serve(ServeArgs),
    /// Run a throughput test against a flowlab or iperf3 server.
    Test(Box<TestArgs>),
    /// Measure this machine's loopback with no setup: an in-process server and a short
    /// TCP and UDP test in each direction.
    Quick(QuickArgs),
    /// Show this machine's network state: congestion control, TCP buffer limits,
    /// queueing disciplines, offloads (recorded in every result as well).
    Sysinfo(SysinfoArgs),
    /// Draw graphs from `flowlab test --json` results: throughput, windows, RTT,
    /// time/sequence, I/O; several results are overlaid.
    Plot(PlotArgs),
    /// Make, split and join fragment sets (for `serve --fragments` and `fetch`).
    #[command(subcommand)]
    Fragments(FragmentsCommand),
    /// Fetch a fragment set from several servers at once, verified and resumable.
    Fetch(FetchArgs),
    /// Emulated networks from a topology file.
    #[command(subcommand)]
    Net(NetCommand),
}

#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Check a topology file and show its plan: subnets, addresses, and for every pair of
    /// hosts the path, RTT and bottleneck rate the file implies (no root needed).
    Show { file: std::path::PathBuf },
    /// Build the topology in network namespaces (root): nodes, links, addresses, routes,
    /// rate and queue limits (tbf), delay, jitter and loss (netem or the user-space
    /// emulator).
    Up {
        file: std::path::PathBuf,
        #[command(flatten)]
        backend: BackendArg,
    },
    /// Remove everything a topology's `up` created (also after a crash).
    Down {
        /// The topology's name (or its file).
        name: String,
    },
    /// List the topologies that are up and their namespaces.
    Status,
    /// Measure each host pair's RTT and bottleneck throughput and print them beside what
    /// the file implies, flagging deviations (builds the topology if it is not up).
    Check {
        file: std::path::PathBuf,
        /// Only these pairs, e.g. h1-h4,h1-h9 (default: every pair of hosts). Routers may
        /// be ends too; `A-B:N` runs N parallel connections.
        #[arg(long, value_name = "A-B[:N],...")]
        pairs: Option<String>,
        /// Seconds of TCP per pair.
        #[arg(short, long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=60))]
        time: u64,
        /// Pace the TCP load at this rate (e.g. 1G) instead of as fast as it goes.
        #[arg(short, long, value_parser = rate)]
        bitrate: Option<u64>,
        /// TCP congestion control of the load, both ends (e.g. cubic; default: the
        /// system's, see `flowlab sysinfo`).
        #[arg(short = 'C', long, value_name = "ALGO")]
        congestion: Option<String>,
        /// Run the pairs' TCP tests at the same time (sharing links), and show each
        /// pair's max-min fair share and Jain's fairness index instead of judging rates.
        #[arg(long)]
        together: bool,
        /// Random-loss measurement: UDP datagrams per pair whose path has loss.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
        loss_packets: u64,
        #[command(flatten)]
        backend: BackendArg,
        /// Print one JSON document.
        #[arg(short = 'J', long)]
        json: bool,
    },
    /// The user-space link emulator (started by `up`; reads its links as JSON on stdin).
    #[command(name = "_emulate", hide = true)]
    Emulate {
        /// Where its counters go (the `up`'s state directory).
        #[arg(long)]
        state_dir: std::path::PathBuf,
        topology: String,
    },
    /// Run a command inside a node: `flowlab net exec h1 -- flowlab test 10.0.5.1`.
    Exec {
        /// Topology name (needed when more than one is up).
        #[arg(short, long)]
        topology: Option<String>,
        node: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct BackendArg {
    /// Where delay, jitter and loss are emulated: the kernel's netem, flowlab's user-space
    /// emulator, or auto (netem when the kernel has it). Rate and queue are always tbf.
    #[arg(long, default_value = "auto", value_name = "auto|netem|userspace")]
    pub backend: flowlab_net::build::Backend,
}

#[derive(Debug, Subcommand)]
pub enum FragmentsCommand {
    /// Cut FILE into fragments with a manifest of their BLAKE3 hashes.
    Split {
        file: std::path::PathBuf,
        /// Number of fragments.
        #[arg(long, default_value_t = 160, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        count: u64,
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
    /// Check every fragment in DIR and reassemble the file.
    Join {
        dir: std::path::PathBuf,
        #[arg(long, value_name = "FILE")]
        out: std::path::PathBuf,
    },
    /// Write a fragment set of deterministic test data, without an input file.
    Make {
        /// Total size, e.g. 1G (binary: 1G = 1073741824 bytes).
        #[arg(long, value_parser = size)]
        size: u64,
        /// Number of fragments.
        #[arg(long, default_value_t = 160, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        count: u64,
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// A server, `host[:port]` (port 5201 by default); give one per server.
    #[arg(long = "from", required = true, value_name = "HOST[:PORT]")]
    pub from: Vec<String>,
    /// Split the fragments between the servers in this ratio, e.g. 1:5 (one per --from).
    #[arg(long, conflicts_with = "adaptive")]
    pub ratio: Option<String>,
    /// Servers take work as they finish (the default without --ratio).
    #[arg(long)]
    pub adaptive: bool,
    /// Directory for the fragments (and the manifest).
    #[arg(long, value_name = "DIR")]
    pub out: std::path::PathBuf,
    /// Connections per server.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub connections: u64,
    /// Requests kept outstanding per connection.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub depth: u64,
    /// Seconds without data after which a server counts as failed.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub stall_timeout: u64,
    /// Run the whole study: fetch once per ratio (e.g. 1:5,1:4,1:3,1:2,1:1,2:1,3:1,4:1,5:1)
    /// and adaptively, into a scratch directory, and print a table of transfer times.
    #[arg(long, value_name = "RATIOS", conflicts_with_all = ["ratio", "adaptive"])]
    pub sweep_ratios: Option<String>,
    /// Runs per ratio in a sweep.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100), requires = "sweep_ratios")]
    pub repeat: u64,
    /// With --sweep-ratios: also draw transfer time against ratio into FILE (.svg/.png).
    #[arg(long, value_name = "FILE", requires = "sweep_ratios")]
    pub chart: Option<std::path::PathBuf>,
    /// Print one JSON document (schema flowlab.fetch/1), no progress bars.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// Ratios to sweep, each with one part per `--from`.
pub type Ratios = Vec<Vec<u32>>;

impl FetchArgs {
    /// One ratio given with `flag`, checked: one part per `--from`.
    fn ratio(&self, flag: &str, text: &str) -> Result<Vec<u32>, String> {
        let r =
            flowlab_fragments::schedule::parse_ratio(text).map_err(|e| format!("{flag}: {e}"))?;
        if r.len() != self.from.len() {
            return Err(format!(
                "{flag}: {text} has {} parts but {} --from servers were given",
                r.len(),
                self.from.len()
            ));
        }
        Ok(r)
    }

    /// The fetch, and the ratios of `--sweep-ratios` when a sweep was asked for.
    pub fn to_spec(&self) -> Result<(flowlab_fragments::fetch::FetchSpec, Option<Ratios>), String> {
        let mut s = flowlab_fragments::fetch::FetchSpec::new(self.from.clone(), self.out.clone());
        if let Some(r) = &self.ratio {
            s.mode = flowlab_fragments::schedule::Mode::Ratio(self.ratio("--ratio", r)?);
        }
        let sweep = match &self.sweep_ratios {
            Some(list) => Some(
                list.split(',')
                    .map(|r| self.ratio("--sweep-ratios", r))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        s.connections = self.connections as usize;
        s.depth = self.depth as usize;
        s.stall_timeout = Duration::from_secs(self.stall_timeout);
        Ok((s, sweep))
    }
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// Result files written by `flowlab test --json` (several are overlaid).
    #[arg(required = true, value_name = "RESULT.json")]
    pub results: Vec<std::path::PathBuf>,
    /// Output file; .svg or .png.
    #[arg(short, long, value_name = "FILE")]
    pub output: std::path::PathBuf,
    /// Which graph: throughput, window, rtt, tseq, io, or all (stacked).
    #[arg(short, long, default_value = "throughput", value_parser = clap::builder::PossibleValuesParser::new(flowlab_plot::Graph::NAMES))]
    pub graph: String,
}

#[derive(Debug, Args)]
pub struct SysinfoArgs {
    /// Print one JSON document.
    #[arg(short = 'J', long)]
    pub json: bool,
}

fn size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}

fn rate(s: &str) -> Result<u64, String> {
    units::parse_rate(s).map_err(|e| e.to_string())
}

fn format(s: &str) -> Result<UnitFormat, String> {
    UnitFormat::parse(s)
        .ok_or_else(|| format!("'{s}' is not one of k m g t (bits), K M G T (bytes), a (adaptive)"))
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Port for TCP and UDP.
    #[arg(short, long, default_value_t = flowlab_proto::DEFAULT_PORT)]
    pub port: u16,
    /// Address to bind (default: every IPv6 and IPv4 address).
    #[arg(short = 'B', long = "bind")]
    pub bind: Option<IpAddr>,
    /// Tests that may run at once; more are refused as busy.
    #[arg(long, default_value_t = 16)]
    pub max_tests: usize,
    /// Longest test allowed, seconds.
    #[arg(long, value_name = "SECONDS")]
    pub max_duration: Option<u64>,
    /// Highest rate one test may ask for, over all its streams (e.g. 100M).
    #[arg(long, value_parser = rate, value_name = "RATE")]
    pub max_bitrate: Option<u64>,
    /// Most bytes one test may move (e.g. 10G).
    #[arg(long, value_parser = size, value_name = "SIZE")]
    pub max_bytes: Option<u64>,
    /// Seconds a silent peer is waited for before its test is dropped.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub idle_timeout: u64,
    /// Serve one test, then exit.
    #[arg(short = '1', long)]
    pub one_off: bool,
    /// Log one JSON object per line instead of text.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Also serve the fragment set in DIR (made by `flowlab fragments`) on the same port.
    #[arg(long, value_name = "DIR")]
    pub fragments: Option<std::path::PathBuf>,
    /// Pace each fragment connection to this rate (e.g. 100M), to emulate a slow server.
    #[arg(long, value_parser = rate, value_name = "RATE", requires = "fragments")]
    pub rate: Option<u64>,
}

impl ServeArgs {
    pub fn to_config(&self) -> Result<ServerConfig, String> {
        if self.max_tests == 0 {
            return Err("--max-tests must be at least 1".into());
        }
        if self.idle_timeout == 0 {
            return Err("--idle-timeout must be at least 1 second".into());
        }
        Ok(ServerConfig {
            bind: self.bind,
            port: self.port,
            max_duration: self.max_duration.map(Duration::from_secs),
            max_bitrate: self.max_bitrate,
            max_bytes: self.max_bytes,
            one_off: self.one_off,
            // One test, then exit: a second client is told the server is busy rather than
            // being cut off when the process ends.
            max_tests: if self.one_off { 1 } else { self.max_tests },
            idle_timeout: Duration::from_secs(self.idle_timeout),
            extra: None,
        })
    }
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Server to test against (name, IPv4 or IPv6 address).
    pub host: String,
    /// Server port.
    #[arg(short, long, default_value_t = flowlab_proto::DEFAULT_PORT)]
    pub port: u16,
    /// UDP instead of TCP.
    #[arg(short, long)]
    pub udp: bool,
    /// Each message waits for the receiver's acknowledgement before the next.
    #[arg(long)]
    pub stop_and_wait: bool,
    /// Stop-and-wait over UDP: retransmission timeout, milliseconds [default: 1000].
    #[arg(long, value_name = "MS")]
    pub rto: Option<u64>,
    /// UDP at unlimited rate: do not slow down when the receiving socket overflows
    /// (send blindly, as iperf3 does). Only a flowlab server reports overflows.
    #[arg(long)]
    pub no_backoff: bool,
    /// Bytes per write (TCP, default 128K) or per datagram (UDP, default 1460).
    #[arg(short = 'l', long = "length", value_parser = size, value_name = "SIZE")]
    pub length: Option<u64>,
    /// Seconds to send (default 10).
    #[arg(short, long, value_name = "SECONDS", group = "amount")]
    pub time: Option<u64>,
    /// Bytes to send in total per direction, exactly (e.g. 100M).
    #[arg(short = 'n', long = "bytes", value_parser = size, value_name = "SIZE", group = "amount")]
    pub bytes: Option<u64>,
    /// Writes or datagrams to send in total per direction.
    #[arg(
        short = 'k',
        long = "blockcount",
        value_name = "COUNT",
        group = "amount"
    )]
    pub blocks: Option<u64>,
    /// Seconds between interval reports; 0 for none.
    #[arg(short, long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// Parallel streams.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    pub parallel: u32,
    /// The server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    pub bidir: bool,
    /// Target rate per stream, bits/s (e.g. 100M); 0 = unlimited. UDP default: unlimited.
    #[arg(short = 'b', long = "bitrate", value_parser = rate, value_name = "RATE")]
    pub bitrate: Option<u64>,
    /// Seconds at the start not counted (TCP slow start).
    #[arg(short = 'O', long, default_value_t = 0, value_name = "SECONDS")]
    pub omit: u64,
    /// Units: k m g t (bits), K M G T (bytes), a (adaptive).
    #[arg(short = 'f', long = "format", value_parser = format, default_value = "a")]
    pub format: UnitFormat,
    /// Milliseconds to wait for the server to accept a connection.
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    pub connect_timeout: u64,
    /// TCP congestion control algorithm (sender and receiver sockets).
    #[arg(short = 'C', long = "congestion", value_name = "ALGO")]
    pub congestion: Option<String>,
    /// Socket buffer size on both ends (e.g. 4M).
    #[arg(short = 'w', long = "window", value_parser = size, value_name = "SIZE")]
    pub window: Option<u64>,
    /// TCP maximum segment size.
    #[arg(short = 'M', long = "set-mss", value_name = "BYTES")]
    pub mss: Option<u32>,
    /// TCP_NODELAY: no Nagle.
    #[arg(short = 'N', long)]
    pub no_delay: bool,
    /// Send with sendfile(2) (zero copy).
    #[arg(short = 'Z', long)]
    pub zerocopy: bool,
    /// A title recorded with the result.
    #[arg(short = 'T', long)]
    pub title: Option<String>,
    /// Sample TCP_INFO of every stream on both ends this often (1ms…1s; default 10ms)
    /// and explain what limited the transfer.
    #[arg(long, value_name = "PERIOD", num_args = 0..=1, default_missing_value = "10ms", require_equals = true)]
    pub trace: Option<String>,
    /// Write the trace samples to FILE as CSV (implies --trace).
    #[arg(long, value_name = "FILE")]
    pub trace_csv: Option<std::path::PathBuf>,
    /// Socket buffer of each stream's receiving end (replaces -w there), e.g. 8M.
    #[arg(long, value_parser = size, value_name = "SIZE")]
    pub recv_window: Option<u64>,
    /// TCP congestion control of each stream's receiving end (replaces -C there).
    #[arg(long, value_name = "ALGO")]
    pub recv_congestion: Option<String>,
    /// Print one JSON document at the end.
    #[arg(short = 'J', long, conflicts_with = "json_stream")]
    pub json: bool,
    /// Print one JSON line per event as it happens.
    #[arg(long)]
    pub json_stream: bool,
}

impl TestArgs {
    /// Validates the combination and builds the engine's spec.
    pub fn to_spec(&self) -> Result<TestSpec, String> {
        let protocol = if self.udp {
            Protocol::Udp
        } else {
            Protocol::Tcp
        };
        let mut s = TestSpec::new(self.host.clone());
        s.port = self.port;
        s.protocol = protocol;
        s.mode = if self.stop_and_wait {
            Mode::StopAndWait
        } else {
            Mode::Streaming
        };
        s.len = match (self.length, protocol) {
            (Some(l), Protocol::Udp) if !(16..=spec::MAX_UDP_LEN as u64).contains(&l) => {
                return Err(format!(
                    "-l/--length {l} is outside 16..={} for UDP",
                    spec::MAX_UDP_LEN
                ));
            }
            (Some(l), Protocol::Tcp) if !(1..=16 << 20).contains(&l) => {
                return Err(format!("-l/--length {l} is outside 1..=16M for TCP"));
            }
            (Some(l), _) => l as usize,
            (None, Protocol::Tcp) => spec::DEFAULT_TCP_LEN,
            (None, Protocol::Udp) => spec::DEFAULT_UDP_LEN,
        };
        s.amount = match (self.time, self.bytes, self.blocks) {
            (Some(0), _, _) => return Err("-t/--time must be at least 1 second".into()),
            (Some(t), _, _) => Amount::Seconds(t),
            (_, Some(0), _) => return Err("-n/--bytes must be more than 0".into()),
            (_, Some(n), _) => Amount::Bytes(n),
            (_, _, Some(0)) => return Err("-k/--blockcount must be more than 0".into()),
            (_, _, Some(k)) => Amount::Blocks(k),
            _ => Amount::Seconds(10),
        };
        if !(self.interval == 0.0 || (0.1..=3600.0).contains(&self.interval)) {
            return Err(format!(
                "-i/--interval {} must be 0 (none) or between 0.1 and 3600 seconds",
                self.interval
            ));
        }
        s.interval = (self.interval > 0.0).then(|| Duration::from_secs_f64(self.interval));
        if !(1..=128).contains(&self.parallel) {
            return Err(format!(
                "-P/--parallel {} must be between 1 and 128",
                self.parallel
            ));
        }
        s.parallel = self.parallel;
        s.direction = match (self.reverse, self.bidir) {
            (true, _) => Direction::Reverse,
            (_, true) => Direction::Bidir,
            _ => Direction::Forward,
        };
        s.bitrate = self.bitrate.unwrap_or(0);
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
        if self.no_backoff && !(self.udp && !self.stop_and_wait && s.bitrate == 0) {
            return Err(
                "--no-backoff applies only to UDP at unlimited rate (-u, no -b or -b 0)".into(),
            );
        }
        s.udp_backoff = !self.no_backoff;
        let trace = match (&self.trace, &self.trace_csv) {
            (Some(p), _) => Some(p.as_str()),
            (None, Some(_)) => Some("10ms"),
            (None, None) => None,
        };
        if let Some(p) = trace {
            let period = units::parse_duration(p).map_err(|e| format!("--trace: {e}"))?;
            if !(trace::MIN_PERIOD..=trace::MAX_PERIOD).contains(&period) {
                return Err(format!("--trace period {p} must be between 1ms and 1s"));
            }
            s.trace = Some(period);
        }
        if let Some(w) = self.recv_window {
            if w == 0 {
                return Err("--recv-window must be more than 0".into());
            }
            s.recv_window = w;
        }
        s.recv_congestion = self.recv_congestion.clone();
        let tcp_only = [
            (self.congestion.is_some(), "-C/--congestion"),
            (self.mss.is_some(), "-M/--set-mss"),
            (self.no_delay, "-N/--no-delay"),
            (self.zerocopy, "-Z/--zerocopy"),
            (self.trace.is_some(), "--trace"),
            (self.trace_csv.is_some(), "--trace-csv"),
            (self.recv_window.is_some(), "--recv-window"),
            (self.recv_congestion.is_some(), "--recv-congestion"),
        ];
        if let Some((_, flag)) = tcp_only.iter().find(|(set, _)| *set && self.udp) {
            return Err(format!("{flag} applies to TCP only; drop it or -u"));
        }
        if self.zerocopy && self.stop_and_wait {
            return Err("-Z/--zerocopy cannot be combined with --stop-and-wait".into());
        }
        if let Some(m) = self.mss {
            if !(88..=65_535).contains(&m) {
                return Err(format!("-M/--set-mss {m} must be between 88 and 65535"));
            }
            s.mss = m;
        }
        s.congestion = self.congestion.clone();
        s.window = self.window.unwrap_or(0);
        s.nodelay = self.no_delay;
        s.zerocopy = self.zerocopy;
        s.title = self.title.clone();
        Ok(s)
    }
}

#[derive(Debug, Args)]
pub struct QuickArgs {
    /// Seconds per test.
    #[arg(short, long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub time: u64,
    /// UDP rate per test (e.g. 1G); 0 = unlimited.
    #[arg(short = 'b', long = "bitrate", value_parser = rate, default_value = "1G")]
    pub bitrate: u64,
    /// Print one JSON document with every result.
    #[arg(short = 'J', long)]
    pub json: bool,
}
