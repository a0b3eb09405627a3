//! The `flowlab` binary: parses arguments, calls the engine, prints results.

mod cli;
mod net_check;
mod progress;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use clap::Parser;
use flowlab_engine::client::{self, Observer};
use flowlab_engine::server::{Server, ServerConfig, ServerEvent, ServerLog};
use flowlab_proto::params::Protocol;
use flowlab_report::result::{Interval, StartInfo, TestResult};
use flowlab_report::spec::{Amount, Direction, TestSpec};
use flowlab_report::units::UnitFormat;

use cli::{Cli, Command};
use flowlab_report::{json, table};

/// Exit code of a usage error (as clap's).
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            // One line that names the flag, not clap's whole usage block.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
                .map(str::trim)
                .collect();
            eprintln!("{}", message.join(" "));
            return ExitCode::from(USAGE);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let outcome = match cli.command {
        Command::Serve(a) => match a.to_config() {
            Ok(cfg) => serve(cfg, &a),
            Err(msg) => return usage(&msg),
        },
        Command::Fragments(c) => fragments(&c),
        Command::Net(c) => net(c),
        Command::Fetch(a) => match a.to_spec() {
            Ok((spec, Some(ratios))) => sweep(&spec, &ratios, &a),
            Ok((spec, None)) => fetch(&spec, a.json),
            Err(msg) => return usage(&msg),
        },
        Command::Test(a) => match a.to_spec() {
            Ok(mut spec) => {
                if spec.trace.is_some() {
                    spec.path_rates = topology_path_rates(&spec.host);
                }
                test(&spec, &a)
            }
            Err(msg) => return usage(&msg),
        },
        Command::Quick(a) => quick(&a),
        Command::Sysinfo(a) => sysinfo(&a),
        Command::Plot(a) => plot(&a),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Engine errors already carry their cause in their message.
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(USAGE)
}

/// Server log lines on stdout: text, or one JSON object each.
struct Log {
    json: bool,
}

impl ServerLog for Log {
    fn event(&self, event: ServerEvent) {
        let line = if self.json {
            serde_json::to_string(&event).unwrap_or_default()
        } else {
            match &event {
                ServerEvent::Listening { address } => {
                    format!("flowlab server listening on {address} (TCP and UDP)")
                }
                ServerEvent::TestStarted {
                    test,
                    peer,
                    protocol,
                    streams,
                    reverse,
                    bidir,
                    client,
                } => format!(
                    "test {test}: {protocol} from {peer}, {streams} stream(s){}{} [{}]",
                    if *reverse { ", reverse" } else { "" },
                    if *bidir { ", bidirectional" } else { "" },
                    client.as_deref().unwrap_or("unknown client")
                ),
                ServerEvent::TestFinished {
                    test,
                    peer,
                    bytes_received,
                    bytes_sent,
                    seconds,
                } => {
                    format!(
                        "test {test}: done with {peer} after {seconds:.2} s: received {bytes_received} B, sent {bytes_sent} B"
                    )
                }
                ServerEvent::TestFailed { test, peer, error } => match test {
                    Some(t) => format!("test {t}: {peer}: {error}"),
                    None => format!("{peer}: {error}"),
                },
                ServerEvent::Refused { peer, reason } => format!("refused {peer}: {reason}"),
            }
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn serve(mut cfg: ServerConfig, a: &cli::ServeArgs) -> anyhow::Result<()> {
    let json = a.json;
    if let Some(dir) = &a.fragments {
        let service = flowlab_fragments::serve::FragmentService::open(
            dir,
            a.rate.unwrap_or(0),
            cfg.idle_timeout,
        )?;
        if !json {
            println!(
                "serving {} fragments from {}{}",
                service.fragments(),
                dir.display(),
                a.rate
                    .map(|r| format!(
                        ", each connection paced to {}",
                        flowlab_report::units::Rate(r as f64, UnitFormat::Adaptive)
                    ))
                    .unwrap_or_default()
            );
        }
        cfg.extra = Some(Arc::new(service));
    }
    let port = cfg.port;
    let server = Server::bind(cfg, Arc::new(Log { json }))
        .map_err(|e| anyhow::anyhow!("cannot listen on port {port}: {e}"))?;
    server.run()?;
    Ok(())
}

/// Prints as the test runs, in the format asked for.
struct Printer {
    format: UnitFormat,
    udp: bool,
    json_stream: bool,
    quiet: bool,
}

impl Printer {
    /// Writes `text` at once (a JSON-stream line or table rows as they come).
    fn write(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

impl Observer for Printer {
    fn started(&mut self, s: &StartInfo) {
        if self.json_stream {
            self.write(&(json::event("start", s) + "\n"));
        } else if !self.quiet {
            self.write(&(table::start(s) + &table::interval_header(self.udp)));
        }
    }

    fn interval(&mut self, iv: &Interval) {
        if self.json_stream {
            self.write(&(json::event("interval", iv) + "\n"));
        } else if !self.quiet {
            self.write(&table::interval(iv, self.format));
        }
    }
}

fn install_ctrl_c() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let presses = AtomicUsize::new(0);
    let f = Arc::clone(&flag);
    let _ = ctrlc::set_handler(move || {
        // First Ctrl-C ends the test cleanly; a second one exits at once.
        if presses.fetch_add(1, Ordering::AcqRel) > 0 {
            std::process::exit(130);
        }
        f.store(true, Ordering::Release);
    });
    flag
}

/// The bottleneck each way to `host` when this process runs inside a flowlab topology
/// (what `--trace` sizes its advice for); nothing elsewhere.
fn topology_path_rates(host: &str) -> flowlab_report::diagnose::PathRates {
    use std::net::{IpAddr, ToSocketAddrs};
    let peer = (host, 0).to_socket_addrs().ok().and_then(|mut a| {
        a.find_map(|a| match a.ip() {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        })
    });
    match (
        peer,
        flowlab_net::locate::here(&flowlab_net::build::state_dir()),
    ) {
        (Some(peer), Some((t, node))) => flowlab_net::locate::path_rates(&t, &node, peer),
        _ => Default::default(),
    }
}

fn test(spec: &TestSpec, a: &cli::TestArgs) -> anyhow::Result<()> {
    let interrupt = install_ctrl_c();
    let mut printer = Printer {
        format: a.format,
        udp: a.udp,
        json_stream: a.json_stream,
        quiet: a.json,
    };
    match client::run(spec, &mut printer, &interrupt) {
        Ok(result) => {
            if let (Some(path), Some(trace)) = (&a.trace_csv, &result.trace) {
                let file = std::fs::File::create(path)
                    .map_err(|e| anyhow::anyhow!("--trace-csv {}: {e}", path.display()))?;
                flowlab_report::csv::write(trace, std::io::BufWriter::new(file))
                    .map_err(|e| anyhow::anyhow!("--trace-csv {}: {e}", path.display()))?;
            }
            if a.json {
                println!("{}", json::document(&result)?);
            } else if a.json_stream {
                printer.write(&json::finish(&result));
            } else {
                print!("{}", table::finish(&result, a.udp, a.format));
            }
            Ok(())
        }
        Err(e) => {
            if a.json {
                println!("{}", json::test_error(&e.to_string())?);
            } else if a.json_stream {
                printer.write(&(json::test_error_event(&e.to_string()) + "\n"));
            }
            Err(e.into())
        }
    }
}

fn plot(a: &cli::PlotArgs) -> anyhow::Result<()> {
    let graph = flowlab_plot::Graph::parse(&a.graph)
        .ok_or_else(|| anyhow::anyhow!("unknown graph '{}'", a.graph))?;
    let mut inputs = Vec::new();
    for path in &a.results {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not JSON: {e}", path.display()))?;
        if value["schema"] != flowlab_report::result::SCHEMA {
            anyhow::bail!(
                "{}: not a flowlab test result (schema {}, expected {})",
                path.display(),
                value["schema"],
                flowlab_report::result::SCHEMA
            );
        }
        if let Some(e) = value["error"].as_str() {
            anyhow::bail!("{}: the test failed ({e}): nothing to draw", path.display());
        }
        let result = serde_json::from_value(value)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let name = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into(),
        );
        inputs.push(flowlab_plot::Input { name, result });
    }
    let panels = flowlab_plot::panels(graph, &inputs)?;
    flowlab_plot::render_file(&panels, &a.output)?;
    eprintln!("wrote {}", a.output.display());
    Ok(())
}

fn fragments(c: &cli::FragmentsCommand) -> anyhow::Result<()> {
    use flowlab_fragments::manifest;
    let (m, what) = match c {
        cli::FragmentsCommand::Split { file, count, out } => (
            manifest::split(file, *count as usize, out)?,
            format!("wrote to {}", out.display()),
        ),
        cli::FragmentsCommand::Make { size, count, out } => (
            manifest::make(*size, *count as usize, out)?,
            format!("wrote to {}", out.display()),
        ),
        cli::FragmentsCommand::Join { dir, out } => (
            manifest::join(dir, out)?,
            format!("verified and joined into {}", out.display()),
        ),
    };
    println!(
        "{}: {} fragments, {} ({} bytes), blake3 {}; {what}",
        m.file.name,
        m.fragments.len(),
        flowlab_report::units::Bytes(m.file.size, UnitFormat::Adaptive),
        m.file.size,
        m.file.blake3
    );
    Ok(())
}

fn fetch(spec: &flowlab_fragments::fetch::FetchSpec, json: bool) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let result = if json || !std::io::stderr().is_terminal() {
        flowlab_fragments::fetch::fetch(spec, &flowlab_fragments::fetch::Silent)?
    } else {
        flowlab_fragments::fetch::fetch(spec, &progress::Bars::new())?
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", table::fetch(&result));
    }
    Ok(())
}

fn sweep(
    spec: &flowlab_fragments::fetch::FetchSpec,
    ratios: &[Vec<u32>],
    a: &cli::FetchArgs,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let bars;
    let progress: &dyn flowlab_fragments::fetch::Progress =
        if a.json || !std::io::stderr().is_terminal() {
            &flowlab_fragments::fetch::Silent
        } else {
            bars = progress::Bars::new();
            &bars
        };
    let result = flowlab_fragments::fetch::sweep(spec, ratios, a.repeat as usize, progress)?;
    if let Some(path) = &a.chart {
        let modes: Vec<String> = result.rows.iter().map(|r| r.mode.clone()).collect();
        let means: Vec<f64> = result.rows.iter().map(|r| r.mean_seconds).collect();
        let panel = flowlab_plot::category_panel(
            &format!(
                "Total transfer time per load-distribution ratio ({} runs each)",
                result.repeat
            ),
            "load-distribution ratio (server A : server B)",
            "transfer time (s)",
            &modes,
            "mean transfer time",
            &means,
        );
        flowlab_plot::render_file(&[panel], path)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", table::sweep(&result));
    }
    Ok(())
}

pub(crate) fn load_topology(
    file: &std::path::Path,
) -> anyhow::Result<flowlab_net::topology::Topology> {
    let text =
        std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    flowlab_net::topology::Topology::parse(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))
}

fn net(c: cli::NetCommand) -> anyhow::Result<()> {
    use flowlab_net::build;
    match c {
        cli::NetCommand::Show { file } => {
            let t = load_topology(&file)?;
            print!(
                "{}",
                table::net_plan(&flowlab_net::topology::Plan::of(&t).summary())
            );
        }
        cli::NetCommand::Up { file, backend } => {
            let t = load_topology(&file)?;
            let state = build::up(&t, &build::state_dir(), &up_options(backend.backend)?)?;
            println!(
                "topology {} is up: {} nodes, {} (flowlab net exec NODE -- CMD; flowlab net down {})",
                t.name,
                t.nodes.len(),
                describe_backend(&state),
                t.name
            );
        }
        cli::NetCommand::Emulate {
            state_dir,
            topology,
        } => emulate(&state_dir, &topology)?,
        cli::NetCommand::Down { name } => {
            // A file names its topology.
            let name = if std::path::Path::new(&name).is_file() {
                load_topology(std::path::Path::new(&name))?.name
            } else {
                name
            };
            let removed = build::down(&name, &build::state_dir())?;
            println!("topology {name}: removed {} namespaces", removed.len());
        }
        cli::NetCommand::Check {
            file,
            pairs,
            time,
            bitrate,
            congestion,
            together,
            loss_packets,
            backend,
            json,
        } => net_check::run(
            &file,
            pairs.as_deref(),
            net_check::Load {
                seconds: time,
                bitrate,
                congestion,
                loss_packets,
                together,
            },
            up_options(backend.backend)?,
            json,
        )?,
        cli::NetCommand::Status => {
            let up = build::status();
            if up.is_empty() {
                println!("no topology is up");
            }
            let dir = build::state_dir();
            for (topo, namespaces) in up {
                let how = build::state(&dir, &topo)
                    .map_or("still building, or its up failed".to_string(), |s| {
                        describe_backend(&s)
                    });
                println!("{topo}: {how}");
                println!("  namespaces: {}", namespaces.join(" "));
                let stats: Vec<flowlab_net::forward::LinkStats> =
                    std::fs::read_to_string(build::stats_file(&dir, &topo))
                        .ok()
                        .and_then(|t| serde_json::from_str(&t).ok())
                        .unwrap_or_default();
                for l in stats {
                    for (way, d) in [("a→b", &l.a_to_b), ("b→a", &l.b_to_a)] {
                        println!(
                            "  link {} {way}: {} forwarded, {} lost (random), {} line full, {} emulator drops, {} oversize, mean lateness {:.0} µs, {} late (worst {} µs), written {:.0} µs early for the cost of sending",
                            l.link,
                            d.forwarded,
                            d.lost,
                            d.line_full,
                            d.emulator_drops,
                            d.oversize,
                            d.mean_late_us(),
                            d.late,
                            d.max_late_us,
                            d.send_cost_ns as f64 / 1000.0
                        );
                    }
                }
            }
        }
        cli::NetCommand::Exec {
            topology,
            node,
            command,
        } => {
            build::preflight()?;
            let topo = match topology {
                Some(t) => t,
                None => match build::status().as_slice() {
                    [(t, _)] => t.clone(),
                    [] => anyhow::bail!("no topology is up (flowlab net up FILE)"),
                    _ => anyhow::bail!("several topologies are up: name one with -t"),
                },
            };
            let ns = build::ns_name(&topo, &node);
            if !build::namespaces().contains(&ns) {
                anyhow::bail!("topology {topo} has no node '{node}' up");
            }
            // Replaced by `ip netns exec`, which execs the command in turn: a signal sent
            // to this process reaches the command, and its exit status is ours.
            use std::os::unix::process::CommandExt;
            let e = std::process::Command::new("ip")
                .args(["netns", "exec", &ns])
                .args(&command)
                .exec();
            anyhow::bail!("ip netns exec: {e}");
        }
    }
    Ok(())
}

pub(crate) fn up_options(
    backend: flowlab_net::build::Backend,
) -> anyhow::Result<flowlab_net::build::UpOptions> {
    Ok(flowlab_net::build::UpOptions {
        backend,
        emulator: std::env::current_exe()?,
    })
}

pub(crate) fn describe_backend(s: &flowlab_net::build::State) -> String {
    match (s.backend, s.emulator_pid) {
        (None, _) => "rate and queue by tbf, no delay or loss to emulate".to_string(),
        (Some(b), Some(pid)) => format!(
            "{b} backend (emulator pid {pid}, links {})",
            s.emulated_links.join(", ")
        ),
        (Some(b), None) => format!("{b} backend"),
    }
}

/// The user-space link emulator: reads its links from stdin, says `ready` on stdout once
/// it forwards, and writes its counters to the stats file until the links go away.
fn emulate(state_dir: &std::path::Path, topology: &str) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let links: Vec<flowlab_net::forward::EmulatedLink> = serde_json::from_str(&input)?;
    let stats = flowlab_net::build::stats_file(state_dir, topology);
    let tmp = stats.with_extension("json.tmp");
    flowlab_net::forward::run(
        links,
        || {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "ready");
            let _ = out.flush();
            // Nothing more is written to stdout: the `up` that reads it is gone soon.
        },
        |s| {
            if let Ok(text) = serde_json::to_string_pretty(s) {
                if std::fs::write(&tmp, text).is_ok() {
                    let _ = std::fs::rename(&tmp, &stats);
                }
            }
        },
    )?;
    Ok(())
}

fn sysinfo(a: &cli::SysinfoArgs) -> anyhow::Result<()> {
    let info = flowlab_engine::sysinfo::collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", table::system(&info));
    }
    Ok(())
}

fn quick(a: &cli::QuickArgs) -> anyhow::Result<()> {
    let cfg = ServerConfig {
        bind: Some([127, 0, 0, 1].into()),
        port: 0,
        ..ServerConfig::default()
    };
    let server = Server::bind(cfg, Arc::new(flowlab_engine::server::NoLog))?;
    let port = server.local_addr().port();
    server.spawn()?;
    let interrupt = install_ctrl_c();
    let cases = [
        ("TCP", Protocol::Tcp, Direction::Forward),
        ("TCP", Protocol::Tcp, Direction::Reverse),
        ("UDP", Protocol::Udp, Direction::Forward),
        ("UDP", Protocol::Udp, Direction::Reverse),
    ];
    let mut results: Vec<TestResult> = Vec::new();
    if !a.json {
        println!(
            "flowlab quick: {} s per test on loopback (server on 127.0.0.1:{port})\n",
            a.time
        );
    }
    for (name, proto, direction) in cases {
        let mut spec = TestSpec::new("127.0.0.1");
        spec.port = port;
        spec.protocol = proto;
        spec.direction = direction;
        spec.amount = Amount::Seconds(a.time);
        spec.interval = None;
        if proto == Protocol::Udp {
            spec.len = flowlab_report::spec::DEFAULT_UDP_LEN;
            spec.bitrate = a.bitrate;
        }
        let r = client::run(&spec, &mut client::Quiet, &interrupt)?;
        if !a.json {
            let way = if direction == Direction::Forward {
                "client → server"
            } else {
                "server → client"
            };
            let rate = if proto == Protocol::Udp && a.bitrate > 0 {
                format!(
                    ", target {}",
                    flowlab_report::units::Rate(a.bitrate as f64, UnitFormat::Adaptive)
                )
            } else {
                String::new()
            };
            println!("{name} {way}{rate}");
            print!("{}", table::whole(&r, UnitFormat::Adaptive));
            println!();
        }
        results.push(r);
        if interrupt.load(Ordering::Acquire) {
            break;
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    }
    Ok(())
}
