//! `flowlab serve`: tests for flowlab and iperf3 clients, and fragment sets, on one port;
//! a log line per event on stdout.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args as ClapArgs;
use flowlab_engine::server::{
    DEFAULT_MAX_DURATION, Server, ServerAuth, ServerConfig, ServerLog, ServerObserver,
};
use flowlab_monitor::server::ServerMetrics;
use flowlab_report::{json, table};
use flowlab_results::result::ServerOutput;
use flowlab_results::server::ServerEvent;
use flowlab_results::units;

use crate::usage::Usage;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Port for TCP and UDP.
    #[arg(short, long, default_value_t = flowlab_proto::DEFAULT_PORT)]
    pub port: u16,
    /// Address to listen on (default: every IPv6 and IPv4 address); %DEV binds to device
    /// DEV too (as iperf3's -B).
    #[arg(short = 'B', long = "bind", value_name = "ADDRESS[%DEV]")]
    pub bind: Option<String>,
    /// Serve one test, then exit.
    #[arg(short = '1', long)]
    pub one_off: bool,
    /// Run in the background once listening, detached from the terminal (as iperf3's -D):
    /// output goes to --logfile, or nowhere; -I/--pidfile records the process to stop.
    #[arg(short = 'D', long)]
    pub daemon: bool,
    /// Log one JSON object per line instead of text.
    #[arg(short = 'J', long, conflicts_with = "iperf3_json")]
    pub json: bool,
    /// Print each test as one JSON document in iperf3's shape (what `iperf3 -s -J`
    /// prints; reduced: docs/json-schema.md); other log lines go to stderr.
    #[arg(long)]
    pub iperf3_json: bool,
    /// Tests that may run at once; more are refused as busy.
    #[arg(help_heading = "Server limits", long, default_value_t = 16)]
    pub max_tests: usize,
    /// Tests that may run at once from one address (IPv6: one /64); more are refused as
    /// busy.
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 4,
        value_name = "N"
    )]
    pub max_tests_per_source: usize,
    /// Longest test allowed, seconds (0: no limit); a test asking for longer is refused,
    /// one running longer is ended.
    #[arg(help_heading = "Server limits", long, value_name = "SECONDS", default_value_t = DEFAULT_MAX_DURATION.as_secs())]
    pub max_duration: u64,
    /// Highest rate one test may ask for, over all its streams (e.g. 100M).
    #[arg(help_heading = "Server limits", long, value_parser = units::parse_rate, value_name = "RATE")]
    pub max_bitrate: Option<u64>,
    /// Most bytes one test may move (e.g. 10G).
    #[arg(help_heading = "Server limits", long, value_parser = units::parse_size, value_name = "SIZE")]
    pub max_bytes: Option<u64>,
    /// Seconds a silent peer is waited for before its test is dropped.
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    pub idle_timeout: u64,
    /// Seconds a new connection has to send its cookie and its whole test parameters.
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 5,
        value_name = "SECONDS"
    )]
    pub handshake_timeout: u64,
    /// Seconds past its time (or --max-duration) a test may run before it is ended.
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 2,
        value_name = "SECONDS"
    )]
    pub end_grace: u64,
    /// Connections held in their handshake at once; more are closed at once.
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 256,
        value_name = "N"
    )]
    pub max_handshakes: usize,
    /// Connections held in their handshake at once from one address (IPv6: one /64).
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 160,
        value_name = "N"
    )]
    pub max_handshakes_per_source: usize,
    /// New connections a second from one address (IPv6: one /64), in bursts of up to
    /// four seconds' worth; more are closed at once.
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 200,
        value_name = "N"
    )]
    pub handshake_rate: u32,
    /// Latency probes (`flowlab ping`) answered a second per address (IPv6: one /64), a
    /// probe counting once per 1500 bytes, in bursts of up to four seconds' worth; the
    /// rest go unanswered.
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 1000,
        value_name = "N"
    )]
    pub probe_rate: u32,
    /// Refusals and failed connections logged per second (the rest are counted).
    #[arg(
        help_heading = "Server limits",
        long,
        default_value_t = 20,
        value_name = "LINES"
    )]
    pub log_rate: u32,
    /// Serve Prometheus metrics of this server (tests started, served and failed, bytes,
    /// refusals by reason, tests running) at http://ADDRESS:PORT/metrics: an address of
    /// its own, best a private one (docs/cli.md). With --http and no address: on
    /// --http's listener, beside the public endpoints.
    #[arg(long, value_name = "ADDRESS:PORT", num_args = 0..=1)]
    pub metrics: Option<Option<std::net::SocketAddr>>,
    /// Serve HTTP as well, on PORT or ADDRESS:PORT (a port alone: on -B's address, or every
    /// address): the speed-test endpoints that Cloudflare's, LibreSpeed's and the
    /// responsiveness method's clients use (docs/web.md).
    #[arg(help_heading = "HTTP", long, value_name = "[ADDRESS:]PORT", value_parser = parse_http_at)]
    pub http: Option<HttpAt>,
    /// Bytes one HTTP download or upload may move (e.g. 100M); a larger one is refused.
    /// Not the responsiveness method's /large and /slurp, which are bounded in time.
    #[arg(help_heading = "HTTP", long, value_parser = units::parse_size, value_name = "SIZE", default_value = "1G", requires = "http")]
    pub http_max_bytes: u64,
    /// HTTP downloads and uploads under way at once; more are refused as busy (503).
    #[arg(
        help_heading = "HTTP",
        long,
        default_value_t = 32,
        value_name = "N",
        requires = "http"
    )]
    pub http_max_transfers: usize,
    /// HTTP downloads and uploads under way at once from one address (IPv6: one /64).
    #[arg(
        help_heading = "HTTP",
        long,
        default_value_t = 8,
        value_name = "N",
        requires = "http"
    )]
    pub http_max_transfers_per_source: usize,
    /// Seconds one HTTP download or upload may take: a download is cut there, an upload
    /// refused (408).
    #[arg(
        help_heading = "HTTP",
        long,
        default_value_t = 60,
        value_name = "SECONDS",
        requires = "http"
    )]
    pub http_max_duration: u64,
    /// With --http: serve TLS too, on the same port (HTTP/2 and HTTP/1.1), with this
    /// certificate chain (PEM, the server's own first) and --tls-key; with --quic, QUIC's
    /// certificate.
    #[arg(
        help_heading = "HTTP",
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls_self_signed"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// --tls-cert's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(
        help_heading = "HTTP",
        long,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,
    /// With --http: serve TLS too, on the same port, with a certificate made now and
    /// signed by itself, for localhost, the loopback addresses, this host's name and
    /// --http's address; its public key's pin is printed, for clients to trust it.
    #[arg(help_heading = "HTTP", long, requires = "http")]
    pub tls_self_signed: bool,
    /// Serve the QUIC performance protocol (ALPN "perf", draft-banks-quic-performance)
    /// on UDP port PORT [default: 4433; 0: a free one, said when it listens], a port of
    /// its own: QUIC's short-header packets cannot be told from iperf3's UDP datagrams on
    /// -p's. TLS with --tls-cert and --tls-key, else a self-signed certificate made now
    /// (its pin printed).
    #[arg(
        help_heading = "QUIC",
        long,
        value_name = "PORT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "4433"
    )]
    pub quic: Option<u16>,
    /// Authenticate clients as iperf3 does: the RSA private key (PEM) their tokens are
    /// encrypted for.
    #[arg(
        help_heading = "Authentication",
        long,
        value_name = "FILE",
        requires = "authorized_users_path"
    )]
    pub rsa_private_key_path: Option<std::path::PathBuf>,
    /// The users allowed in: `user,sha256hex("{user}password")` lines, as iperf3's.
    #[arg(
        help_heading = "Authentication",
        long,
        value_name = "FILE",
        requires = "rsa_private_key_path"
    )]
    pub authorized_users_path: Option<std::path::PathBuf>,
    /// Seconds a client's token time may differ from this machine's clock.
    #[arg(
        help_heading = "Authentication",
        long,
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    pub time_skew_threshold: u64,
    /// Tokens with PKCS#1 v1.5 padding (iperf3 3.16 and older), not RSA-OAEP. Weaker: see
    /// docs/SECURITY.md.
    #[arg(help_heading = "Authentication", long)]
    pub use_pkcs1_padding: bool,
    /// Authentication tokens decrypted per second at most, in bursts of up to four
    /// seconds' worth (the rest fail unread).
    #[arg(
        help_heading = "Authentication",
        long,
        default_value_t = 20,
        value_name = "N"
    )]
    pub auth_rate: u32,
    /// Authentication tokens decrypted per second at most from one address (IPv6: one
    /// /64), in bursts of up to four seconds' worth, before the server-wide --auth-rate.
    #[arg(
        help_heading = "Authentication",
        long,
        default_value_t = 5,
        value_name = "N"
    )]
    pub auth_rate_per_source: u32,
    /// Also serve the fragment set in DIR (made by `flowlab fragments`) on the same port.
    #[arg(help_heading = "Fragments", long, value_name = "DIR")]
    pub fragments: Option<std::path::PathBuf>,
    /// Pace each fragment connection to this rate (e.g. 100M), to emulate a slow server.
    #[arg(help_heading = "Fragments", long, value_parser = units::parse_rate, value_name = "RATE", requires = "fragments")]
    pub rate: Option<u64>,
    /// Serve fragments only to clients that send the token in FILE (16 to 256 bytes; one
    /// line): `flowlab fetch --token-file`.
    #[arg(
        help_heading = "Fragments",
        long,
        value_name = "FILE",
        requires = "fragments"
    )]
    pub token_file: Option<std::path::PathBuf>,
    /// Fragment connections served at once (each holds two threads).
    #[arg(
        help_heading = "Fragments",
        long,
        default_value_t = 64,
        value_name = "N",
        requires = "fragments"
    )]
    pub max_fragment_connections: usize,
    /// Fragment connections served at once from one address (IPv6: one /64).
    #[arg(
        help_heading = "Fragments",
        long,
        default_value_t = 16,
        value_name = "N",
        requires = "fragments"
    )]
    pub max_fragment_connections_per_source: usize,
    /// Run the whole server on CPU N (iperf3's -A for a server); a client's `-A ,M` still
    /// places its own test's streams.
    #[arg(help_heading = "Sockets", short = 'A', long, value_name = "N")]
    pub affinity: Option<usize>,
    /// Every test's data is FILE: sent from it when the server sends (-R), written to it
    /// anew when it receives; TCP tests of one stream one way only (iperf3's -F).
    #[arg(help_heading = "Sockets", short = 'F', long, value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
    /// TCP: a test stream whose data goes unacknowledged this many milliseconds fails
    /// (TCP_USER_TIMEOUT; iperf3's --snd-timeout).
    #[arg(help_heading = "Sockets", long, value_name = "MS")]
    pub snd_timeout: Option<u64>,
    /// TCP keepalive on every test's control connection: seconds idle before the first
    /// probe, seconds between probes, probes unanswered before it is dropped; any left
    /// off are the kernel's (iperf3's --cntl-ka).
    #[arg(
        help_heading = "Sockets",
        long = "cntl-ka",
        value_name = "IDLE/INTERVAL/COUNT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        value_parser = flowlab_results::spec::Keepalive::parse
    )]
    pub cntl_ka: Option<flowlab_results::spec::Keepalive>,
    /// Bind every socket to network device DEV (SO_BINDTODEVICE; iperf3's --bind-dev).
    #[arg(help_heading = "Sockets", long, value_name = "DEV")]
    pub bind_dev: Option<String>,
    #[command(flatten, next_help_heading = "Output")]
    pub output: crate::args::OutputArgs,
}

/// Where `--http` listens: a port on -B's address (or every address), or an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpAt {
    Port(u16),
    Address(std::net::SocketAddr),
}

impl HttpAt {
    /// The address to bind, given -B's (`None`: every IPv6 and IPv4 address).
    pub fn socket_addr(self, bind: Option<std::net::IpAddr>) -> std::net::SocketAddr {
        match self {
            HttpAt::Address(a) => a,
            HttpAt::Port(p) => {
                std::net::SocketAddr::new(bind.unwrap_or(std::net::Ipv6Addr::UNSPECIFIED.into()), p)
            }
        }
    }
}

pub(crate) fn parse_http_at(text: &str) -> Result<HttpAt, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(HttpAt::Port(port));
    }
    text.parse().map(HttpAt::Address).map_err(|_| {
        format!("'{text}' is neither a port nor ADDRESS:PORT (8080, 0.0.0.0:8080, [::1]:8080)")
    })
}

impl Args {
    /// The server's configuration, or which flag is out of range.
    pub fn to_config(&self) -> Result<ServerConfig, Usage> {
        if self.max_tests == 0 {
            return Err("--max-tests must be at least 1".into());
        }
        if self.max_tests_per_source == 0 {
            return Err("--max-tests-per-source must be at least 1".into());
        }
        for (v, flag) in [
            (self.max_handshakes, "--max-handshakes"),
            (
                self.max_handshakes_per_source,
                "--max-handshakes-per-source",
            ),
            (self.log_rate as usize, "--log-rate"),
            (self.handshake_rate as usize, "--handshake-rate"),
            (self.probe_rate as usize, "--probe-rate"),
            (self.max_fragment_connections, "--max-fragment-connections"),
            (
                self.max_fragment_connections_per_source,
                "--max-fragment-connections-per-source",
            ),
        ] {
            if v == 0 {
                return Err(Usage(format!("{flag} must be at least 1")));
            }
        }
        for (v, flag) in [
            (self.idle_timeout, "--idle-timeout"),
            (self.handshake_timeout, "--handshake-timeout"),
            (self.end_grace, "--end-grace"),
        ] {
            if !(1..=3600).contains(&v) {
                return Err(Usage(format!("{flag} must be 1 to 3600 seconds, not {v}")));
            }
        }
        if self.auth_rate == 0 {
            return Err("--auth-rate must be at least 1".into());
        }
        for (v, flag) in [
            (self.http_max_transfers, "--http-max-transfers"),
            (
                self.http_max_transfers_per_source,
                "--http-max-transfers-per-source",
            ),
        ] {
            // The most a semaphore counts; far beyond any server's connections.
            if !(1..=1_000_000).contains(&v) {
                return Err(Usage(format!("{flag} must be 1 to 1000000, not {v}")));
            }
        }
        if !(1..=86_400).contains(&self.http_max_duration) {
            return Err(Usage(format!(
                "--http-max-duration must be 1 to 86400 seconds, not {}",
                self.http_max_duration
            )));
        }
        if self.tls_cert.is_some() && self.http.is_none() && self.quic.is_none() {
            return Err("--tls-cert serves --http or --quic: give one of them".into());
        }
        if self.auth_rate_per_source == 0 {
            return Err("--auth-rate-per-source must be at least 1".into());
        }
        let auth = match (&self.rsa_private_key_path, &self.authorized_users_path) {
            (Some(key), Some(users)) => Some(Arc::new(self.server_auth(key, users)?)),
            _ => None,
        };
        let (bind, bind_dev) =
            super::bind_and_device(None, self.bind.as_deref(), self.bind_dev.as_deref())?;
        match (self.metrics, self.http) {
            (Some(None), None) => {
                return Err(
                    "--metrics needs ADDRESS:PORT (without one it is served on --http's)".into(),
                );
            }
            (Some(Some(m)), Some(h)) if h.socket_addr(bind) != m => {
                return Err(Usage(format!(
                    "--metrics {m} and --http: one HTTP listener a process; give --metrics \
                     without an address to serve /metrics on --http's"
                )));
            }
            _ => {}
        }
        if let Some(ms) = self.snd_timeout.filter(|ms| !(1..=86_400_000).contains(ms)) {
            return Err(Usage(format!(
                "--snd-timeout {ms} must be 1 to 86400000 ms (a day)"
            )));
        }
        if let Some(ka) = &self.cntl_ka {
            flowlab_engine::sock::check_keepalive(ka).map_err(|e| Usage(e.to_string()))?;
        }
        Ok(ServerConfig {
            auth,
            bind,
            bind_dev,
            snd_timeout: self.snd_timeout.map(Duration::from_millis),
            control_keepalive: self.cntl_ka,
            file: self.file.clone(),
            port: self.port,
            max_duration: (self.max_duration > 0).then(|| Duration::from_secs(self.max_duration)),
            max_bitrate: self.max_bitrate,
            max_bytes: self.max_bytes,
            one_off: self.one_off,
            // One test, then exit: a second client is told the server is busy rather than
            // being cut off when the process ends.
            // `-F`: one file, so one test at a time (as iperf3 serves them).
            max_tests: if self.one_off || self.file.is_some() {
                1
            } else {
                self.max_tests
            },
            max_tests_per_source: self.max_tests_per_source,
            idle_timeout: Duration::from_secs(self.idle_timeout),
            handshake_timeout: Duration::from_secs(self.handshake_timeout),
            max_handshakes: self.max_handshakes,
            max_handshakes_per_source: self.max_handshakes_per_source,
            handshake_rate: self.handshake_rate,
            probe_rate: self.probe_rate,
            log_rate: self.log_rate,
            end_grace: Duration::from_secs(self.end_grace),
            extra: None,
        })
    }
}

impl Args {
    /// The authentication the key and users files give.
    fn server_auth(&self, key: &Path, users: &Path) -> Result<ServerAuth, Usage> {
        use flowlab_proto::auth;
        let read = |p: &Path, flag: &str| {
            std::fs::read_to_string(p).map_err(|e| Usage(format!("{flag} {}: {e}", p.display())))
        };
        let key = auth::private_key_from_pem(&read(key, "--rsa-private-key-path")?)
            .map_err(|e| Usage(format!("--rsa-private-key-path {}: {e}", key.display())))?;
        let users_text = read(users, "--authorized-users-path")?;
        let list = auth::AuthorizedUsers::parse(&users_text);
        if list.is_empty() {
            return Err(Usage(format!(
                "--authorized-users-path {}: no `user,sha256hex` lines",
                users.display()
            )));
        }
        if self.use_pkcs1_padding {
            eprintln!(
                "warning: --use-pkcs1-padding: PKCS#1 v1.5 is weaker than RSA-OAEP; \
                 use it only for iperf3 3.16 and older clients (docs/SECURITY.md)"
            );
        }
        let padding = if self.use_pkcs1_padding {
            auth::Padding::Pkcs1v15
        } else {
            auth::Padding::Oaep
        };
        Ok(ServerAuth::new(
            key,
            list,
            padding,
            Duration::from_secs(self.time_skew_threshold),
            self.auth_rate,
            self.auth_rate_per_source,
        ))
    }
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let output = &a.output;
    let mut cfg = a.to_config()?;
    if let Some(cpu) = a.affinity {
        let allowed = flowlab_engine::cpu::allowed_cpus();
        if !allowed.contains(&cpu) {
            return Err(Usage(format!(
                "-A/--affinity {cpu}: this machine runs flowlab on CPUs {}, not {cpu}",
                flowlab_engine::cpu::cpu_list(&allowed)
            ))
            .into());
        }
        // Before any thread starts: they all inherit it.
        flowlab_engine::cpu::pin_thread(cpu).context("-A/--affinity")?;
    }
    let mut fragments = None;
    if let Some(dir) = &a.fragments {
        let mut service = flowlab_fragments::serve::FragmentService::open(
            dir,
            a.rate.unwrap_or(0),
            cfg.idle_timeout,
        )?
        .with_limits(
            a.max_fragment_connections,
            a.max_fragment_connections_per_source,
        );
        if let Some(path) = &a.token_file {
            let token = super::read_token(path, true)?;
            service = service.with_token(&token)?;
        }
        if !a.json {
            super::emit(&table::serving_fragments(service.fragments(), dir, a.rate));
        }
        let service = Arc::new(service);
        fragments = Some(Arc::clone(&service));
        cfg.extra = Some(service);
    }
    let at = match cfg.bind {
        Some(ip) => std::net::SocketAddr::new(ip, cfg.port).to_string(),
        None => format!("[::]:{} (every address)", cfg.port),
    };
    // One HTTP listener, bound now, so a port in use is said on the terminal; served
    // once detached.
    let mut said_tls = None;
    // QUIC on a UDP port of its own, bound now for the same reason; served once detached.
    let quic_at = a.quic.map(|port| match cfg.bind {
        Some(ip) => std::net::SocketAddr::new(ip, port),
        None => std::net::SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port),
    });
    let tls = match (a.http, quic_at) {
        (Some(at), _) => tls_identity(a, at.socket_addr(cfg.bind))?,
        (None, Some(at)) => tls_identity(a, at)?,
        (None, None) => None,
    };
    let quic = match (quic_at, &tls) {
        (Some(at), Some(tls)) => {
            let socket = std::net::UdpSocket::bind(at).with_context(|| {
                format!(
                    "--quic: cannot listen on UDP {at} (another server has it? give --quic=PORT)"
                )
            })?;
            // With --http as well, HTTP/3 on the same port: its routes over QUIC.
            let alpn: &[&[u8]] = match a.http {
                Some(_) => &[flowlab_proto::quic_perf::ALPN, flowlab_quic::h3::ALPN],
                None => &[flowlab_proto::quic_perf::ALPN],
            };
            Some((socket, tls.config(alpn)?))
        }
        _ => None,
    };
    let log = Log {
        json: a.json,
        iperf3: a.iperf3_json,
        quic: quic
            .as_ref()
            .and_then(|(socket, _)| socket.local_addr().ok()),
        started: Default::default(),
    };
    let listener = match (a.http, a.metrics) {
        (Some(at), _) => {
            let addr = at.socket_addr(cfg.bind);
            let listener = flowlab_web::Listener::bind(addr)
                .with_context(|| format!("--http {addr}: cannot listen there"))?;
            match &tls {
                Some(tls) if tls.for_http => {
                    said_tls = Some(tls.said.clone());
                    Some(listener.tls(tls.config(&[b"h2", b"http/1.1"])?))
                }
                _ => Some(listener),
            }
        }
        (None, Some(Some(addr))) => Some(
            flowlab_web::Listener::bind(addr)
                .with_context(|| format!("--metrics {addr}: cannot listen there"))?,
        ),
        _ => None,
    };
    let metrics = match a.metrics {
        Some(_) => Some(Arc::new(ServerMetrics::new()?)),
        None => None,
    };
    // With --http, the live view (/status) is told what the server does.
    let hub = a.http.map(|_| flowlab_web::status::StatusHub::new());
    let observer = (metrics.is_some() || hub.is_some()).then(|| {
        Arc::new(Counted {
            metrics: metrics.clone(),
            status: hub.clone(),
        }) as Arc<dyn ServerObserver>
    });
    let server = Server::bind_observed(cfg, Arc::new(log), observer).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (another server has that port: stop it, or give this one another with -p)"
        } else {
            ""
        };
        anyhow::Error::new(e).context(format!("cannot listen on {at}, TCP and UDP{hint}"))
    })?;
    // Detached only now, listening, so a port in use is still said on the terminal; and
    // before any thread is started, as fork(2) keeps only the calling one.
    let _pidfile = if a.daemon {
        super::detach(output.logfile.is_some(), || pidfile(output))?
    } else {
        pidfile(output)?
    };
    let mut http3 = None;
    let _serving = match listener {
        Some(listener) => {
            let at = listener.local_addr()?;
            let mut routes = flowlab_web::Routes::new();
            let mut said = String::new();
            if a.http.is_some() {
                let (m, status) = (metrics.clone(), hub.clone());
                let observer = Arc::new(move |e: flowlab_web::speed::Event| {
                    use flowlab_web::speed::Event;
                    if let Some(m) = &m {
                        match e {
                            Event::Download => m.http_transfer("download"),
                            Event::Upload => m.http_transfer("upload"),
                            Event::Sent(n) => m.http_sent(n),
                            Event::Received(n) => m.http_received(n),
                            Event::Refused(reason) => m.http_refused(reason),
                            Event::PageRun => {}
                        }
                    }
                    if let Some(status) = &status {
                        status.http(e);
                    }
                }) as flowlab_web::speed::Observer;
                let limits = flowlab_web::speed::Limits {
                    max_bytes: a.http_max_bytes,
                    max_transfers: a.http_max_transfers,
                    max_transfers_per_source: a.http_max_transfers_per_source,
                    max_duration: Duration::from_secs(a.http_max_duration),
                    ..Default::default()
                };
                let congestion = flowlab_engine::sysinfo::collect().congestion_default;
                routes = routes.speed_test(limits, Some(observer), congestion);
                if let Some(hub) = &hub {
                    routes = routes.status(hub.clone());
                }
                if let Some(set) = &fragments {
                    routes =
                        routes.files("/fragments", Arc::new(FragmentsOverHttp(Arc::clone(set))));
                    said += &format!(
                        "the fragment set at http://{at}/fragments/{} and each fragment by name\n",
                        flowlab_fragments::manifest::MANIFEST
                    );
                }
                let every = if at.ip().is_unspecified() {
                    "every address; "
                } else {
                    ""
                };
                said += &format!(
                    "speed test at http://{at}/, live status at http://{at}/status, and the \
                     endpoints of standard clients ({every}docs/web.md)\n"
                );
                if let Some(tls) = &said_tls {
                    said += &format!("TLS on the same port, https://{at}/: {tls}\n");
                }
            }
            if let Some(m) = metrics {
                routes = routes.text("/metrics", flowlab_monitor::CONTENT_TYPE, move || {
                    m.encode()
                });
                said += &format!("metrics at http://{at}/metrics\n");
            }
            if let (Some(quic), true) = (quic_at, a.http.is_some()) {
                // Browsers move to HTTP/3 when an https answer says where it is.
                routes = routes.alt_svc(quic.port());
                http3 = Some(routes.handler());
                said += &format!(
                    "HTTP/3 on UDP port {} (each answer's Alt-Svc says so)\n",
                    quic.port()
                );
            }
            let serving = listener.serve(routes).context("the HTTP listener")?;
            if !a.json && !a.iperf3_json {
                super::emit(&said);
            }
            Some(serving)
        }
        None => None,
    };
    let _quic = match quic {
        Some((socket, config)) => {
            let at = socket.local_addr()?;
            let limits = flowlab_quic::server::Limits {
                max_connections: a.max_tests,
                max_bytes: a.max_bytes,
                max_duration: (a.max_duration > 0).then(|| Duration::from_secs(a.max_duration)),
                ..Default::default()
            };
            let beside = flowlab_quic::server::Beside {
                report: Some(server.reporter()),
                http3,
            };
            let quic = flowlab_quic::server::Server::start_on(socket, config, limits, beside)
                .with_context(|| format!("--quic: UDP {at}"))?;
            if !a.json && !a.iperf3_json {
                let every = if at.ip().is_unspecified() {
                    " (every address)"
                } else {
                    ""
                };
                let tls = tls.as_ref().map(|t| t.said.as_str()).unwrap_or_default();
                super::emit(&format!(
                    "QUIC perf (ALPN \"perf\") on UDP {at}{every}: {tls}\n"
                ));
            }
            Some(quic)
        }
        None => None,
    };
    server.run()?;
    Ok(())
}

/// The addresses of this host's interfaces, each once; not IPv6 link-local ones, which
/// a URL can name only with a zone.
fn interface_addresses() -> Vec<String> {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for address in interfaces.filter_map(|i| i.address) {
        let ip = if let Some(v4) = address.as_sockaddr_in() {
            std::net::IpAddr::V4(v4.ip())
        } else if let Some(v6) = address.as_sockaddr_in6() {
            if v6.ip().is_unicast_link_local() {
                continue;
            }
            std::net::IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        let ip = ip.to_string();
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

/// The certificate `--tls-cert`/`--tls-key` or `--tls-self-signed` ask for (or `--quic`,
/// which always serves TLS, made self-signed when no files are given), for a server at
/// `addr`; with what to say of it. `None` when nothing serves TLS.
fn tls_identity(a: &Args, addr: std::net::SocketAddr) -> anyhow::Result<Option<Tls>> {
    use flowlab_web::tls::{Certificate, self_signed_names};
    let certificate = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => Certificate::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        _ if a.tls_self_signed || a.quic.is_some() => {
            // Listening on every address, the certificate names every one the host has: a
            // phone reaches it by its LAN address.
            let listening = if addr.ip().is_unspecified() {
                interface_addresses()
            } else {
                vec![addr.ip().to_string()]
            };
            Certificate::SelfSigned {
                names: self_signed_names(&listening),
            }
        }
        _ => return Ok(None),
    };
    let flag = match certificate {
        Certificate::Files { .. } => "--tls-cert/--tls-key",
        Certificate::SelfSigned { .. } if a.tls_self_signed => "--tls-self-signed",
        Certificate::SelfSigned { .. } => "--quic's self-signed certificate",
    };
    let identity = certificate.load().with_context(|| flag.to_string())?;
    let said = match (&certificate, &identity.spki_sha256) {
        (Certificate::SelfSigned { names }, Some(pin)) => format!(
            "a self-signed certificate for {}; its public key's SHA-256 {pin} \
             (Chromium: --ignore-certificate-errors-spki-list={pin})",
            names.join(", ")
        ),
        (Certificate::SelfSigned { names }, None) => {
            format!("a self-signed certificate for {}", names.join(", "))
        }
        (Certificate::Files { cert, .. }, _) => format!("the certificate in {}", cert.display()),
    };
    Ok(Some(Tls {
        for_http: a.tls_cert.is_some() || a.tls_self_signed,
        certificate,
        identity,
        flag,
        said,
    }))
}

/// A certificate in hand, and what the server says of it.
struct Tls {
    certificate: flowlab_web::tls::Certificate,
    identity: flowlab_web::tls::Identity,
    flag: &'static str,
    said: String,
    /// Whether HTTP serves it too: asked for by a flag, not made only for `--quic`.
    for_http: bool,
}

impl Tls {
    /// A server's TLS configuration offering `alpn`.
    fn config(&self, alpn: &[&[u8]]) -> anyhow::Result<Arc<flowlab_web::tls::ServerConfig>> {
        self.identity
            .clone()
            .server_config(alpn, &self.certificate)
            .with_context(|| self.flag.to_string())
    }
}

/// `--fragments` with `--http`: the set also by HTTP, opened as the native service opens
/// it, behind the same token.
struct FragmentsOverHttp(Arc<flowlab_fragments::serve::FragmentService>);

impl flowlab_web::files::FileSet for FragmentsOverHttp {
    fn index_name(&self) -> &str {
        flowlab_fragments::manifest::MANIFEST
    }

    fn index(&self) -> Vec<u8> {
        self.0.manifest_json().to_vec()
    }

    fn open(&self, name: &str) -> Result<(std::fs::File, u64), String> {
        self.0.open_named(name)
    }

    fn authorized(&self, bearer: Option<&[u8]>) -> bool {
        self.0.admits(bearer)
    }

    fn rate_bps(&self) -> u64 {
        self.0.rate_bps()
    }
}

/// Who counts every event the server logs: its metrics, its live view.
struct Counted {
    metrics: Option<Arc<ServerMetrics>>,
    status: Option<Arc<flowlab_web::status::StatusHub>>,
}

impl ServerObserver for Counted {
    fn observe(&self, event: &ServerEvent) {
        if let Some(m) = &self.metrics {
            m.observe(event);
        }
        if let Some(s) = &self.status {
            s.observe(event);
        }
    }
}

/// The pid file of -I/--pidfile, written, removed when the server ends.
fn pidfile(output: &crate::args::OutputArgs) -> anyhow::Result<Option<super::PidFile>> {
    Ok(match &output.pidfile {
        Some(path) => Some(super::PidFile::write_until_signalled(path)?),
        None => None,
    })
}

/// Server log lines on stdout: text, or one JSON object each.
struct Log {
    json: bool,
    /// Where `--quic` listens, for the `listening` event (the engine's server knows only
    /// its own ports).
    quic: Option<std::net::SocketAddr>,
    /// `--iperf3-json`: a document per test on stdout, the rest as text on stderr.
    iperf3: bool,
    /// With `iperf3`: each running test's start, until its end.
    started: std::sync::Mutex<std::collections::HashMap<u64, ServerEvent>>,
}

impl Log {
    /// `--iperf3-json`: a test's document once it ends (an error document if it
    /// failed), every other event a text line on stderr.
    fn iperf3_event(&self, event: ServerEvent) {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        let doc = match &event {
            ServerEvent::TestStarted { test, .. } => {
                started.insert(*test, event.clone());
                None
            }
            ServerEvent::TestFinished { test, .. } => started
                .remove(test)
                .and_then(|s| flowlab_report::iperf3_json::server_document(&s, &event)),
            ServerEvent::TestFailed {
                test: Some(test),
                error,
                ..
            } => {
                started.remove(test);
                Some(flowlab_report::iperf3_json::error_document(error))
            }
            _ => None,
        };
        drop(started);
        match doc {
            Some(doc) => {
                super::emit_json(&(serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"))
            }
            None => eprintln!("{}", table::server_event(&event)),
        }
    }
}

impl ServerLog for Log {
    fn event(&self, event: ServerEvent) {
        let event = match event {
            ServerEvent::Listening {
                address,
                quic: None,
            } => ServerEvent::Listening {
                address,
                quic: self.quic.map(|at| at.to_string()),
            },
            other => other,
        };
        if self.iperf3 {
            return self.iperf3_event(event);
        }
        if self.json {
            super::emit_json(&json::line(&event));
        } else {
            super::emit(&(table::server_event(&event) + "\n"));
        }
    }

    /// A JSON log sends its test's events as JSON (`server_output_json`), a text log its
    /// lines.
    fn output(&self, events: &[ServerEvent]) -> ServerOutput {
        if let (true, [start, done]) = (self.iperf3, events) {
            if let Some(doc) = flowlab_report::iperf3_json::server_document(start, done) {
                return ServerOutput::Json(doc);
            }
        }
        if self.json {
            ServerOutput::Json(serde_json::to_value(events).unwrap_or_default())
        } else {
            ServerOutput::Text(table::server_events(events))
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every host (and network namespace) has loopback; a link-local IPv6 address, which
    /// no URL names without a zone, is left out; none twice.
    #[test]
    fn interface_addresses_have_loopback_once_and_no_link_local() {
        let all = super::interface_addresses();
        assert_eq!(
            all.iter().filter(|a| *a == "127.0.0.1").count(),
            1,
            "{all:?}"
        );
        assert!(!all.iter().any(|a| a.starts_with("fe80:")), "{all:?}");
    }
}
