//! The study's servers: a `flowlab serve` child each, started before the first trial on
//! a port the kernel picks, stopped when the run ends (also on Ctrl-C or an error: they
//! are [`Reaped`] when dropped).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};
use flowlab_report::server::ServerEvent;

use crate::cmd::Reaped;

/// How long a server is given to say it listens.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running server and the port it listens on.
#[derive(Debug)]
pub struct Running {
    pub port: u16,
    _child: Reaped,
}

/// Starts `flowlab serve` with `argv` (from [`super::check::serve_line`]) in `dir`,
/// inside network namespace `ns` when given, and waits for its `listening` line.
pub fn start(name: &str, argv: &[String], ns: Option<&str>, dir: &Path) -> anyhow::Result<Running> {
    let mut cmd = crate::cmd::flowlab_child(ns)?;
    let mut child = Reaped(
        cmd.args(argv)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("server {name}: starting flowlab serve"))?,
    );
    let stdout = child.0.stdout.take().context("server stdout")?;
    let stderr = child.0.stderr.take().context("server stderr")?;
    let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let keep = std::sync::Arc::clone(&said);
    // What it says on stderr: the reason when it does not start.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(mut s) = keep.lock() {
                if s.len() < 4096 {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        }
    });
    let (tx, rx) = mpsc::channel();
    // Reads the first line for the port, then drains the log so the server never blocks
    // on a full pipe.
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(first)) = lines.next() {
            let _ = tx.send(first);
        }
        for _ in lines {}
    });
    let port = match rx.recv_timeout(START_TIMEOUT) {
        Ok(line) => match serde_json::from_str::<ServerEvent>(&line) {
            Ok(ServerEvent::Listening { address }) => address
                .rsplit(':')
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .with_context(|| format!("server {name}: no port in '{address}'"))?,
            _ => bail!("server {name}: flowlab serve said '{line}', not where it listens"),
        },
        Err(_) => {
            let _ = child.0.kill();
            let _ = child.0.wait();
            // The stderr reader ends with the process.
            std::thread::sleep(Duration::from_millis(50));
            let why = said
                .lock()
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            bail!(
                "server {name}: flowlab serve did not start{}",
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                }
            )
        }
    };
    Ok(Running {
        port,
        _child: child,
    })
}
