//! `flowlab quick`: this machine's loopback with no setup: an in-process server, then a
//! short TCP and UDP test in each direction, each with latency probes beside it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use clap::Args as ClapArgs;
use flowlab_engine::client;
use flowlab_engine::server::{NoLog, Server, ServerConfig};
use flowlab_report::units::UnitFormat;
use flowlab_report::{json, table};
use flowlab_results::result::TestResult;
use flowlab_results::spec::{Amount, DEFAULT_UDP_LEN, Direction, TestSpec, Transport};
use flowlab_results::units;

use super::emit;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Seconds per test.
    #[arg(short, long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub time: u64,
    /// UDP rate per test (e.g. 1G); 0 = unlimited.
    #[arg(short = 'b', long = "bitrate", value_parser = units::parse_rate, default_value = "1G")]
    pub bitrate: u64,
    /// Print one JSON document with every result.
    #[arg(short = 'J', long)]
    pub json: bool,
    #[command(flatten, next_help_heading = "Output")]
    pub output: crate::args::OutputArgs,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    // A server of this process's own, on loopback: none of a public server's caps on
    // a test's length.
    let cfg = ServerConfig {
        bind: Some([127, 0, 0, 1].into()),
        port: 0,
        max_duration: None,
        ..ServerConfig::default()
    };
    let server = Server::bind(cfg, Arc::new(NoLog))?;
    let port = server.local_addr().port();
    server.spawn()?;
    let interrupt = super::install_ctrl_c();
    let cases = [
        ("TCP", Transport::Tcp, Direction::Forward),
        ("TCP", Transport::Tcp, Direction::Reverse),
        ("UDP", Transport::Udp, Direction::Forward),
        ("UDP", Transport::Udp, Direction::Reverse),
    ];
    let mut results: Vec<TestResult> = Vec::new();
    if !a.json {
        emit(&table::quick_heading(a.time, port));
    }
    for (name, protocol, direction) in cases {
        let mut spec = TestSpec::new("127.0.0.1");
        spec.port = port;
        spec.protocol = protocol;
        spec.direction = direction;
        spec.amount = Amount::Seconds(a.time as f64);
        spec.interval = None;
        // Round trips before and under each load (`test --latency`).
        spec.latency = Some(std::time::Duration::from_millis(10));
        if protocol == Transport::Udp {
            spec.len = DEFAULT_UDP_LEN;
            spec.bitrate = a.bitrate;
        }
        let r = client::run(&spec, &mut client::Quiet, &interrupt)?;
        if !a.json {
            let target = (protocol == Transport::Udp && a.bitrate > 0).then_some(a.bitrate);
            emit(&table::quick_case(
                name,
                direction == Direction::Reverse,
                target,
            ));
            emit(&(table::whole(&r, UnitFormat::Adaptive) + "\n"));
        }
        results.push(r);
        if interrupt.load(Ordering::Acquire) {
            break;
        }
    }
    if a.json {
        let shown = results
            .iter()
            .map(json::test_value)
            .collect::<serde_json::Result<Vec<_>>>()?;
        println!("{}", json::document(&shown)?);
    }
    Ok(())
}
