//! `flowlab ping`: round trips to a flowlab server's echo service, probe by probe, and
//! their percentiles.

use std::time::Duration;

use clap::Args as ClapArgs;
use flowlab_engine::ping::{PingMode, PingObserver, PingSpec, ping};
use flowlab_report::{json, table};
use flowlab_results::ping::Probe;

use crate::usage::Usage;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The server (`flowlab serve`), a name or an address.
    pub host: String,
    #[command(flatten)]
    pub family: crate::args::FamilyArgs,
    /// The server's port.
    #[arg(short, long, default_value_t = flowlab_proto::DEFAULT_PORT)]
    pub port: u16,
    /// Probes to send (default: until -t, --deadline or Ctrl-C).
    #[arg(short, long, value_name = "N")]
    pub count: Option<u64>,
    /// Between probes: seconds (0.2) or with a unit (200ms); at least 1 ms, or 0 for back
    /// to back (the next probe when the last is answered).
    #[arg(short, long, default_value = "1", value_name = "INTERVAL")]
    pub interval: String,
    /// Bytes per probe: a UDP payload, 48 to 65507 (default 64); with --tcp a message, 1
    /// to 1048576 (default 1; from 48 on it carries the server's times). Replies are as
    /// long.
    #[arg(short, long, value_name = "BYTES")]
    pub size: Option<usize>,
    /// Request/response on one TCP connection (transactions per second with -i 0, like
    /// netperf's TCP_RR).
    #[arg(long, conflicts_with = "connect")]
    pub tcp: bool,
    /// A new TCP connection per probe: the time connect(2) takes (SYN to SYN-ACK).
    #[arg(long, conflicts_with = "size")]
    pub connect: bool,
    /// Send probes for this long (seconds, or with a unit).
    #[arg(short = 't', long = "time", value_name = "DURATION")]
    pub time: Option<String>,
    /// End the run after this long, whatever is outstanding.
    #[arg(long, value_name = "DURATION")]
    pub deadline: Option<String>,
    /// How long to wait for a reply after the last probe (and, back to back, before the
    /// next probe goes).
    #[arg(short = 'W', long, default_value = "1", value_name = "DURATION")]
    pub timeout: String,
    /// With --tcp: how long to poll for each response before sleeping until it comes
    /// (default 200us with -i 0, where a response is due at once; else 0: sleep at
    /// once). Polling keeps this end's CPU from idling between transactions, so its
    /// wake-up stays out of the count.
    #[arg(long, value_name = "DURATION", requires = "tcp")]
    pub spin: Option<String>,
    /// Both clocks are synchronised (PTP, a good NTP): show absolute one-way delays.
    #[arg(long)]
    pub clocks_synced: bool,
    /// Only the summary, no line per reply.
    #[arg(short, long)]
    pub quiet: bool,
    /// Also print the round trips' percentile distribution.
    #[arg(long)]
    pub histogram: bool,
    /// One JSON document (schema flowlab.ping/1) with every probe.
    #[arg(short = 'J', long)]
    pub json: bool,
    #[command(flatten)]
    pub credentials: crate::args::CredentialArgs,
    #[command(flatten, next_help_heading = "Output")]
    pub output: crate::args::OutputArgs,
}

/// How long a back-to-back TCP run polls for each response before it sleeps: more than a
/// loopback or LAN round trip, little beside a WAN one.
const DEFAULT_SPIN: Duration = Duration::from_micros(200);

/// Seconds as a plain number (`0.2`), or a number with a unit (`200ms`), up to a day.
fn seconds(flag: &str, text: &str) -> Result<Duration, Usage> {
    crate::usage::seconds(flag, text, true, 86_400.0)
}

impl Args {
    pub fn to_spec(&self) -> Result<PingSpec, Usage> {
        let mut s = PingSpec::new(&self.host, self.port);
        s.family = self.family.family();
        s.credentials = self.credentials.credentials()?;
        s.count = self.count;
        if self.count == Some(0) {
            return Err("-c/--count must be at least 1".into());
        }
        s.interval = seconds("-i/--interval", &self.interval)?;
        if !s.interval.is_zero() && s.interval < Duration::from_millis(1) {
            return Err(Usage(format!(
                "-i/--interval {}: at least 1 ms, or 0 for back to back",
                self.interval
            )));
        }
        s.mode = match (self.tcp, self.connect) {
            (true, _) => PingMode::Tcp,
            (_, true) => PingMode::Connect,
            _ => PingMode::Udp,
        };
        if s.credentials.is_some() && s.mode == PingMode::Udp {
            return Err(
                "--username applies to --tcp and --connect: UDP probes carry no credentials \
                 (a server answers them whether it authenticates or not)"
                    .into(),
            );
        }
        let sizes = s.mode.sizes();
        s.size = self.size.unwrap_or(match s.mode {
            PingMode::Udp => 64,
            _ => 1,
        });
        if !sizes.contains(&s.size) {
            return Err(Usage(format!(
                "-s/--size {}: a {} probe is {} to {} bytes",
                s.size,
                s.mode.name(),
                sizes.start(),
                sizes.end()
            )));
        }
        s.duration = self
            .time
            .as_deref()
            .map(|t| seconds("-t/--time", t))
            .transpose()?;
        s.deadline = self
            .deadline
            .as_deref()
            .map(|t| seconds("--deadline", t))
            .transpose()?;
        s.timeout = seconds("-W/--timeout", &self.timeout)?;
        if s.timeout.is_zero() {
            return Err("-W/--timeout must be more than 0".into());
        }
        s.spin = match &self.spin {
            Some(t) => crate::usage::seconds("--spin", t, true, 1.0)?,
            None if s.mode == PingMode::Tcp && s.interval.is_zero() => DEFAULT_SPIN,
            None => Duration::ZERO,
        };
        s.clocks_synced = self.clocks_synced;
        Ok(s)
    }
}

/// A line per reply as it comes.
struct Lines(PingMode);

impl PingObserver for Lines {
    fn reply(&self, probe: &Probe, from: std::net::SocketAddr, size: usize) {
        super::emit(&table::ping_reply(
            probe,
            &from.to_string(),
            self.0.name(),
            size,
        ));
    }
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let spec = a.to_spec()?;
    let stop = super::install_ctrl_c();
    let lines = !a.json && !a.quiet;
    if !a.json {
        super::emit(&table::ping_header(
            &spec.host,
            spec.port,
            spec.mode.name(),
            spec.size,
            spec.interval.as_secs_f64(),
        ));
    }
    let result = if lines {
        ping(&spec, &stop, &Lines(spec.mode))?
    } else {
        ping(&spec, &stop, &flowlab_engine::ping::Quiet)?
    };
    if a.json {
        println!("{}", json::document(&result)?);
    } else {
        super::emit(&table::ping_summary(&result));
        if a.histogram {
            super::emit(&table::ping_histogram(&result));
        }
    }
    // As iputils' ping: no reply at all is a failure (exit code 1), said after the
    // summary, with what answers these probes.
    if result.summary.sent > 0 && result.summary.received == 0 {
        anyhow::bail!(
            "no reply from {} port {}: flowlab ping probes the echo service of a `flowlab \
             serve` there (it is not ICMP); is one running on that port?",
            spec.host,
            spec.port
        );
    }
    Ok(())
}
