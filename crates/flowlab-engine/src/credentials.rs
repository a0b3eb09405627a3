//! A client's side of authentication: iperf3's token for a test's parameters, and for
//! the echo and load connections of an authenticating server (`flowlab ping --tcp`,
//! `--connect`, `flowlab rpm`) a token once, then the ticket the server gave for it, so
//! that a run of many connections costs the server one RSA decryption.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use flowlab_proto::auth;
use flowlab_proto::credential::{Credential, TICKET_LEN, TICKET_LIFETIME_SECS};
use flowlab_results::spec::Credentials;

/// How long before its end a ticket is no longer used: a connection opened just before
/// would reach the server after it.
const TICKET_MARGIN: Duration = Duration::from_secs(30);

/// iperf3's authentication token for these credentials, made now.
pub fn token(c: &Credentials) -> Result<String, String> {
    let key = auth::public_key_from_pem(&c.public_key_pem)
        .map_err(|e| format!("--rsa-public-key-path: {e}"))?;
    let padding = if c.pkcs1 {
        auth::Padding::Pkcs1v15
    } else {
        auth::Padding::Oaep
    };
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    auth::encode_token(
        &key,
        padding,
        &c.user,
        &c.password,
        now,
        &mut rand_core::OsRng,
    )
    .map_err(|e| format!("encrypting the credentials: {e}"))
}

/// The credentials of a run that opens many connections, and the ticket the server gave
/// it, shared by the run's threads. Its `Debug` shows neither the password nor the
/// ticket.
pub struct ClientAuth {
    credentials: Credentials,
    ticket: Mutex<Option<([u8; TICKET_LEN], Instant)>>,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.ticket.lock().map(|t| t.is_some()).unwrap_or(false);
        f.debug_struct("ClientAuth")
            .field("credentials", &self.credentials)
            .field("ticket", &if held { "(held)" } else { "(none)" })
            .finish()
    }
}

impl ClientAuth {
    pub fn new(credentials: Credentials) -> ClientAuth {
        ClientAuth {
            credentials,
            ticket: Mutex::new(None),
        }
    }

    /// What the next connection shows: the ticket while it is good, else a new token.
    pub fn credential(&self) -> Result<Credential, String> {
        let ticket = self.ticket.lock().unwrap_or_else(PoisonError::into_inner);
        let usable = Duration::from_secs(TICKET_LIFETIME_SECS) - TICKET_MARGIN;
        match *ticket {
            Some((k, at)) if at.elapsed() < usable => Ok(Credential::Ticket(k)),
            _ => token(&self.credentials).map(Credential::Token),
        }
    }

    /// Forgets the ticket: the server refused it (it restarted, or let it go), so the
    /// next connection shows a new token.
    pub(crate) fn forget_ticket(&self) {
        *self.ticket.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Keeps a ticket the server issued.
    pub(crate) fn keep(&self, ticket: [u8; TICKET_LEN]) {
        *self.ticket.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((ticket, Instant::now()));
    }
}
