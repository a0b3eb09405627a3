//! The study's servers: a `flowlab serve` at the place each, started before the first
//! trial on a port the kernel picks, stopped when the run ends (also on a stop or an
//! error: a [`Process`] is killed when dropped).

use std::path::Path;
use std::time::Duration;

use flowlab_results::server::ServerEvent;

use crate::Error as RunError;
use crate::error::io;
use crate::place::{Job, Output, Place, Process};

/// How long a server is given to say it listens.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running server, the port it listens on, and its QUIC port when it serves QUIC
/// (`--quic`).
#[derive(Debug)]
pub struct Running {
    pub port: u16,
    pub quic_port: Option<u16>,
    _process: Box<dyn Process>,
}

/// Starts `flowlab serve` with `argv` (from [`crate::study::lines::serve_line`]) in `dir` at
/// `place`, inside network namespace `ns` when given, and waits for its `listening`
/// line.
pub fn start(
    place: &dyn Place,
    name: &str,
    argv: &[String],
    ns: Option<&str>,
    dir: &Path,
) -> Result<Running, RunError> {
    let job = Job { argv, dir, ns };
    let mut process = place
        .start(&job, Output::FirstLine)
        .map_err(io(format!("server {name}: starting flowlab serve")))?;
    let Some(line) = process.first_line(START_TIMEOUT) else {
        process.kill();
        let said = process.finish().stderr;
        let why = String::from_utf8_lossy(&said).trim().to_string();
        return Err(RunError::Failed(format!(
            "server {name}: flowlab serve did not start{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        )));
    };
    let port_of = |address: &str| {
        address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| RunError::Failed(format!("server {name}: no port in '{address}'")))
    };
    let (port, quic_port) = match serde_json::from_str::<ServerEvent>(&line) {
        Ok(ServerEvent::Listening { address, quic }) => (
            port_of(&address)?,
            quic.as_deref().map(port_of).transpose()?,
        ),
        _ => {
            return Err(RunError::Failed(format!(
                "server {name}: flowlab serve said '{line}', not where it listens"
            )));
        }
    };
    Ok(Running {
        port,
        quic_port,
        _process: process,
    })
}
