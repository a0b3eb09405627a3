//! Argument groups several commands share: where output goes, `-4`/`-6`, iperf3's
//! authentication.

use crate::usage::Usage;

/// Where output goes, how its lines begin, and the pid file: iperf3's options of these
/// names, taken by the commands that run for a while and print as they go (serve, test,
/// ping, rpm, quick, fetch, run), so other commands' help does not list them.
#[derive(Debug, clap::Args)]
pub struct OutputArgs {
    /// Append everything printed, output and errors, to FILE instead (as iperf3's
    /// --logfile).
    #[arg(long, value_name = "FILE")]
    pub logfile: Option<std::path::PathBuf>,
    /// Flush output at every line (iperf3's --forceflush; flowlab always does).
    #[arg(long)]
    pub forceflush: bool,
    /// Begin each line of text output with the local time, as strftime(3) FORMAT (default
    /// "%c "; as iperf3's --timestamps). JSON output is left as it is.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true, default_missing_value = "%c ")]
    pub timestamps: Option<String>,
    /// Write this process's id to FILE while it runs, removed when it ends (as iperf3's
    /// -I).
    #[arg(short = 'I', long, value_name = "FILE")]
    pub pidfile: Option<std::path::PathBuf>,
}

/// `-4`/`-6` (iperf3's, ping's): only the server's addresses of one family.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct FamilyArgs {
    /// Only the server's IPv4 addresses (iperf3's -4).
    #[arg(short = '4', long = "version4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Only the server's IPv6 addresses (iperf3's -6).
    #[arg(short = '6', long = "version6")]
    pub ipv6: bool,
}

impl FamilyArgs {
    pub fn family(self) -> Option<flowlab_results::spec::IpFamily> {
        use flowlab_results::spec::IpFamily;
        match (self.ipv4, self.ipv6) {
            (true, _) => Some(IpFamily::Ipv4),
            (_, true) => Some(IpFamily::Ipv6),
            _ => None,
        }
    }
}

/// iperf3's authentication (`--username`), for a server that authenticates its clients.
#[derive(Debug, Clone, clap::Args)]
pub struct CredentialArgs {
    /// Authenticate as this user (iperf3's --username); the password comes from the
    /// IPERF3_PASSWORD environment variable, or is asked for on the terminal.
    #[arg(long, value_name = "NAME", requires = "rsa_public_key_path")]
    pub username: Option<String>,
    /// The server's RSA public key (PEM), for --username.
    #[arg(long, value_name = "FILE", requires = "username")]
    pub rsa_public_key_path: Option<std::path::PathBuf>,
    /// Encrypt the credentials with PKCS#1 v1.5 padding (iperf3 3.16 and older servers)
    /// instead of RSA-OAEP.
    #[arg(long, requires = "username")]
    pub use_pkcs1_padding: bool,
}

impl CredentialArgs {
    /// The credentials, the password read (IPERF3_PASSWORD, or asked for) and the key
    /// checked; `None` without `--username`.
    pub fn credentials(&self) -> Result<Option<flowlab_results::spec::Credentials>, Usage> {
        let (Some(user), Some(key)) = (&self.username, &self.rsa_public_key_path) else {
            return Ok(None);
        };
        let password = password()?;
        let public_key_pem = std::fs::read_to_string(key)
            .map_err(|e| Usage(format!("--rsa-public-key-path {}: {e}", key.display())))?;
        flowlab_proto::auth::public_key_from_pem(&public_key_pem)
            .map_err(|e| Usage(format!("--rsa-public-key-path {}: {e}", key.display())))?;
        Ok(Some(flowlab_results::spec::Credentials {
            user: user.clone(),
            password,
            public_key_pem,
            pkcs1: self.use_pkcs1_padding,
        }))
    }
}

/// The password for `--username`: IPERF3_PASSWORD, as iperf3 reads it, or else asked for
/// on the terminal without echo.
fn password() -> Result<String, Usage> {
    if let Ok(p) = std::env::var("IPERF3_PASSWORD") {
        return Ok(p);
    }
    rpassword::prompt_password("Password: ").map_err(|e| {
        Usage(format!(
            "--username: cannot ask for the password ({e}); set it in the IPERF3_PASSWORD \
             environment variable"
        ))
    })
}
