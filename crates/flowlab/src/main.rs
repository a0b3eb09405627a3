//! The `flowlab` binary: parses arguments, calls the engine, prints results.

mod cli;
mod progress;
mod report;
mod trace_csv;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use clap::Parser;
use flowlab_engine::client::{self, Observer};
use flowlab_engine::result::{Interval, StartInfo, TestResult};
use flowlab_engine::server::{Server, ServerConfig, ServerEvent, ServerLog};
use flowlab_engine::spec::{Amount, Direction, TestSpec};
use flowlab_engine::units::UnitFormat;
use flowlab_proto::params::Protocol;

use cli::{Cli, Command};

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
            Ok(spec) => match a.sweep() {
                Ok(Some(ratios)) => sweep(&spec, &ratios, &a),
                Ok(None) => fetch(&spec, a.json),
                Err(msg) => return usage(&msg),
            },
            Err(msg) => return usage(&msg),
        },
        Command::Test(a) => match a.to_spec() {
            Ok(spec) => test(&spec, &a),
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
                        flowlab_engine::units::Rate(r as f64, UnitFormat::Adaptive)
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
    fn emit(&self, event: &str, data: &impl serde::Serialize) {
        let line = serde_json::json!({ "event": event, "data": data });
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

impl Observer for Printer {
    fn started(&mut self, s: &StartInfo) {
        if self.json_stream {
            self.emit("start", s);
        } else if !self.quiet {
            print!("{}{}", report::start(s), report::interval_header(self.udp));
        }
    }

    fn interval(&mut self, iv: &Interval) {
        if self.json_stream {
            self.emit("interval", iv);
        } else if !self.quiet {
            print!("{}", report::interval(iv, self.format));
            let _ = std::io::stdout().flush();
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
                trace_csv::write(trace, std::io::BufWriter::new(file))
                    .map_err(|e| anyhow::anyhow!("--trace-csv {}: {e}", path.display()))?;
            }
            if a.json {
                println!("{}", serde_json::to_string_pretty(&result)?);
            } else if a.json_stream {
                printer.emit("end", &result.end);
                if let Some(t) = &result.trace {
                    printer.emit("trace", t);
                }
            } else {
                if let Some(e) = &result.end {
                    print!("{}", report::end(e, a.format));
                }
                if let Some(t) = &result.trace {
                    print!("{}", report::diagnosis(t));
                }
            }
            Ok(())
        }
        Err(e) => {
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "schema": flowlab_engine::result::SCHEMA, "error": e.to_string() })
                    )?
                );
            } else if a.json_stream {
                printer.emit("error", &serde_json::json!({ "message": e.to_string() }));
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
        if value["schema"] != flowlab_engine::result::SCHEMA {
            anyhow::bail!(
                "{}: not a flowlab test result (schema {}, expected {})",
                path.display(),
                value["schema"],
                flowlab_engine::result::SCHEMA
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
        flowlab_engine::units::Bytes(m.file.size, UnitFormat::Adaptive),
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
        print!("{}", report::fetch(&result));
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
        print!("{}", report::sweep(&result));
    }
    Ok(())
}

fn load_topology(file: &std::path::Path) -> anyhow::Result<flowlab_net::topology::Topology> {
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
            print!("{}", report::net_plan(&flowlab_net::topology::Plan::of(&t)));
        }
        cli::NetCommand::Up { file } => {
            let t = load_topology(&file)?;
            build::up(&t, &build::state_dir())?;
            println!(
                "topology {} is up: {} namespaces (flowlab net exec NODE -- CMD; flowlab net down {})",
                t.name,
                t.nodes.len(),
                t.name
            );
        }
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
            json,
        } => net_check(&file, pairs.as_deref(), time, json)?,
        cli::NetCommand::Status => {
            let up = build::status();
            if up.is_empty() {
                println!("no topology is up");
            }
            for (topo, namespaces) in up {
                println!("{topo}: {}", namespaces.join(" "));
            }
        }
        cli::NetCommand::Exec {
            topology,
            node,
            command,
        } => {
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
            let status = std::process::Command::new("ip")
                .args(["netns", "exec", &ns])
                .args(&command)
                .status()
                .map_err(|e| anyhow::anyhow!("ip netns exec: {e}"))?;
            if !status.success() {
                std::process::exit(status.code().unwrap_or(1));
            }
        }
    }
    Ok(())
}

/// One measured path of `net check`.
#[derive(Debug, serde::Serialize)]
struct CheckRow {
    from: String,
    to: String,
    implied_rtt_ms: f64,
    measured_rtt_ms: Option<f64>,
    implied_bps: Option<u64>,
    measured_bps: f64,
    /// What falls outside the tolerances (RTT ±1 ms; rate 0.90–1.02 of the bottleneck).
    deviations: Vec<String>,
}

fn net_check(
    file: &std::path::Path,
    pairs: Option<&str>,
    seconds: u64,
    json: bool,
) -> anyhow::Result<()> {
    use flowlab_net::build;
    use flowlab_net::topology::Plan;
    let t = load_topology(file)?;
    let plan = Plan::of(&t);
    let hosts: Vec<String> = t.hosts().cloned().collect();
    let pairs: Vec<(String, String)> = match pairs {
        Some(list) => list
            .split(',')
            .map(|p| {
                let (a, b) = p
                    .split_once('-')
                    .ok_or_else(|| anyhow::anyhow!("--pairs: '{p}' is not A-B"))?;
                for h in [a, b] {
                    if !hosts.iter().any(|x| x == h) {
                        anyhow::bail!("--pairs: '{h}' is not a host of {}", t.name);
                    }
                }
                Ok((a.to_string(), b.to_string()))
            })
            .collect::<anyhow::Result<_>>()?,
        None => hosts
            .iter()
            .enumerate()
            .flat_map(|(i, a)| hosts[i + 1..].iter().map(move |b| (a.clone(), b.clone())))
            .collect(),
    };
    // Build it for the check when it is not up, and take it down again afterwards.
    struct Teardown(Option<String>);
    impl Drop for Teardown {
        fn drop(&mut self) {
            if let Some(name) = &self.0 {
                let _ = flowlab_net::build::down(name, &flowlab_net::build::state_dir());
            }
        }
    }
    let up_already = build::status().iter().any(|(n, _)| *n == t.name);
    let _teardown = if up_already {
        Teardown(None)
    } else {
        build::up(&t, &build::state_dir())?;
        Teardown(Some(t.name.clone()))
    };
    let me = std::env::current_exe()?;
    let address = |host: &str| {
        build::interfaces(&plan)
            .into_iter()
            .find(|(n, _, _)| n == host)
            .map(|(_, a, _)| std::net::Ipv4Addr::from(a).to_string())
    };
    let mut rows = Vec::new();
    for (a, b) in pairs {
        let implied = plan
            .path(&a, &b)
            .ok_or_else(|| anyhow::anyhow!("no path from {a} to {b}"))?;
        let to = address(&b).ok_or_else(|| anyhow::anyhow!("{b} has no address"))?;
        /// The server in the destination host, killed however this pair ends.
        struct Server(std::process::Child);
        impl Drop for Server {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let _server = Server(
            std::process::Command::new("ip")
                .args(["netns", "exec", &build::ns_name(&t.name, &b)])
                .arg(&me)
                .args(["serve", "-1", "-p", "5201"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()?,
        );
        // The server is ready when it accepts: retry a refused connection for up to 5 s.
        let mut tries = 0;
        let out = loop {
            let out = std::process::Command::new("ip")
                .args(["netns", "exec", &build::ns_name(&t.name, &a)])
                .arg(&me)
                .args([
                    "test",
                    &to,
                    "-t",
                    &seconds.to_string(),
                    "--trace=20ms",
                    "-J",
                ])
                .output()?;
            let refused = String::from_utf8_lossy(&out.stdout).contains("cannot connect");
            tries += 1;
            if !refused || tries == 50 {
                break out;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| anyhow::anyhow!("{a} -> {b}: no result ({e})"))?;
        if let Some(e) = v["error"].as_str() {
            anyhow::bail!("{a} -> {b}: {e}");
        }
        let measured_bps = v["end"]["sums"][0]["receiver"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0);
        let measured_rtt_ms = v["trace"]["diagnosis"][0]["evidence"]["min_rtt_us"]
            .as_f64()
            .map(|us| us / 1000.0);
        let implied_rtt_ms = implied.rtt.as_secs_f64() * 1000.0;
        let deviations = flowlab_net::check::deviations(
            &implied,
            measured_rtt_ms.map(|ms| std::time::Duration::from_secs_f64(ms / 1000.0)),
            measured_bps,
        );
        rows.push(CheckRow {
            from: a,
            to: b,
            implied_rtt_ms,
            measured_rtt_ms,
            implied_bps: implied.bottleneck_bps,
            measured_bps,
            deviations,
        });
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "{:<14} {:>12} {:>12} {:>18} {:>18}  deviations",
        "path", "RTT implied", "measured", "rate implied", "measured"
    );
    for r in &rows {
        let rate = |bps: f64| flowlab_engine::units::Rate(bps, UnitFormat::Adaptive).to_string();
        println!(
            "{:<14} {:>9.2} ms {:>9} ms {:>18} {:>18}  {}",
            format!("{}-{}", r.from, r.to),
            r.implied_rtt_ms,
            r.measured_rtt_ms
                .map_or("?".to_string(), |m| format!("{m:.2}")),
            r.implied_bps
                .map_or("unlimited".to_string(), |b| rate(b as f64)),
            rate(r.measured_bps),
            if r.deviations.is_empty() {
                "-".to_string()
            } else {
                r.deviations.join("; ")
            }
        );
    }
    Ok(())
}

fn sysinfo(a: &cli::SysinfoArgs) -> anyhow::Result<()> {
    let info = flowlab_engine::sysinfo::collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", report::system(&info));
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
            spec.len = flowlab_engine::spec::DEFAULT_UDP_LEN;
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
                    flowlab_engine::units::Rate(a.bitrate as f64, UnitFormat::Adaptive)
                )
            } else {
                String::new()
            };
            println!("{name} {way}{rate}");
            print!("{}", report::whole(&r, UnitFormat::Adaptive));
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
