//! `flowlab serve`: tests for flowlab and iperf3 clients, and fragment sets, on one port;
//! a log line per event on stdout.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args as ClapArgs;
use flowlab_engine::server::{Server, ServerConfig, ServerLog};
use flowlab_report::server::ServerEvent;
use flowlab_report::{json, table, units};

use crate::cli::Usage;

#[derive(Debug, ClapArgs)]
pub struct Args {
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
    #[arg(long, value_parser = units::parse_rate, value_name = "RATE")]
    pub max_bitrate: Option<u64>,
    /// Most bytes one test may move (e.g. 10G).
    #[arg(long, value_parser = units::parse_size, value_name = "SIZE")]
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
    #[arg(long, value_parser = units::parse_rate, value_name = "RATE", requires = "fragments")]
    pub rate: Option<u64>,
}

impl Args {
    /// The server's configuration, or which flag is out of range.
    pub fn to_config(&self) -> Result<ServerConfig, Usage> {
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

pub fn run(a: &Args) -> anyhow::Result<()> {
    let mut cfg = a.to_config()?;
    if let Some(dir) = &a.fragments {
        let service = flowlab_fragments::serve::FragmentService::open(
            dir,
            a.rate.unwrap_or(0),
            cfg.idle_timeout,
        )?;
        if !a.json {
            super::emit(&table::serving_fragments(service.fragments(), dir, a.rate));
        }
        cfg.extra = Some(Arc::new(service));
    }
    let port = cfg.port;
    let server = Server::bind(cfg, Arc::new(Log { json: a.json }))
        .with_context(|| format!("cannot listen on port {port}"))?;
    server.run()?;
    Ok(())
}

/// Server log lines on stdout: text, or one JSON object each.
struct Log {
    json: bool,
}

impl ServerLog for Log {
    fn event(&self, event: ServerEvent) {
        let line = if self.json {
            json::line(&event)
        } else {
            table::server_event(&event) + "\n"
        };
        super::emit(&line);
    }
}
