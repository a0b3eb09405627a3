//! A server that authenticates its clients as iperf3 does (see `flowlab_proto::auth`):
//! the key and the users, the skew allowed, what a token may cost, and the tickets that
//! admit a client's further echo and load connections.
//!
//! RSA decryption leaks timing (the Marvin attack needs many thousands of decryptions),
//! and each costs the server a millisecond or so, so a token is decrypted only when it
//! can be one and has not been seen before, and within two budgets: the source's
//! (`--auth-rate-per-source`), then the server's (`--auth-rate`). A connection with no
//! token, or with bytes that cannot be a ciphertext for this key, or a replayed token,
//! spends neither: one address cannot lock credentialed users out by failing.
//!
//! A token is accepted once: the server remembers each token it accepted for as long as
//! its time could still pass the skew check, and refuses it again (iperf3 does not).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use flowlab_proto::auth::{self, AuthError, AuthorizedUsers, Padding};
use flowlab_proto::credential::{TICKET_LEN, TICKET_LIFETIME_SECS};
use rsa::RsaPrivateKey;
use rsa::traits::PublicKeyParts;

use super::limits::RateGate;
use flowlab_proto::source::source_key;

/// Tickets held at once; beyond it the one that expires soonest makes room. Tickets are
/// issued only for tokens that passed, whose rate the budgets bound.
const MAX_TICKETS: usize = 8192;

/// How the server authenticates. Its `Debug` shows neither the key nor the users.
pub struct ServerAuth {
    key: RsaPrivateKey,
    users: AuthorizedUsers,
    padding: Padding,
    /// Seconds a token's time may differ from the server's clock.
    skew: i64,
    per_second: u32,
    per_source: u32,
    /// Decryptions per source, then server-wide (one bucket under one key).
    source_budget: RateGate,
    server_budget: RateGate,
    /// Fingerprints of the tokens accepted, with the Unix second after which their time
    /// can no longer pass the skew check.
    accepted: Mutex<HashMap<[u8; 32], i64>>,
    /// Fingerprints of the tickets issued: to which source, until when.
    tickets: Mutex<HashMap<[u8; 32], (IpAddr, Instant)>>,
}

impl std::fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAuth")
            .field("users", &self.users.len())
            .field("padding", &self.padding)
            .field("skew", &self.skew)
            .field("per_second", &self.per_second)
            .field("per_source", &self.per_source)
            .finish_non_exhaustive()
    }
}

/// The one key of the server-wide budget.
const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

impl ServerAuth {
    /// `per_second` decryptions a second server-wide and `per_source` from one source
    /// (IPv4 address, IPv6 /64), each in bursts of up to four seconds' worth.
    pub fn new(
        key: RsaPrivateKey,
        users: AuthorizedUsers,
        padding: Padding,
        skew: Duration,
        per_second: u32,
        per_source: u32,
    ) -> ServerAuth {
        ServerAuth {
            key,
            users,
            padding,
            skew: i64::try_from(skew.as_secs()).unwrap_or(i64::MAX),
            per_second,
            per_source,
            source_budget: RateGate::new(per_source),
            server_budget: RateGate::new(per_second),
            accepted: Mutex::new(HashMap::new()),
            tickets: Mutex::new(HashMap::new()),
        }
    }

    /// Checks a token from `source`; the user's name when it passes. The token is then
    /// spent: the same token is refused from then on.
    pub(super) fn check(&self, token: Option<&str>, source: IpAddr) -> Result<String, AuthError> {
        let token = token.ok_or(AuthError::NoToken)?;
        let sealed = auth::sealed_of(token, self.key.size())?;
        let print = auth::fingerprint(&sealed);
        let now = unix_now();
        if self.spent(&print, now) {
            return Err(AuthError::Replayed);
        }
        if !self.source_budget.allow(source) {
            return Err(AuthError::SourceRateLimited);
        }
        if !self.server_budget.allow(SERVER) {
            return Err(AuthError::RateLimited);
        }
        let user = auth::check(
            &self.key,
            self.padding,
            &self.users,
            self.skew,
            Some(token),
            now,
            &mut rand_core::OsRng,
        )?;
        // Two tests racing with one token: the second to get here loses.
        if !self.spend(print, now) {
            return Err(AuthError::Replayed);
        }
        Ok(user)
    }

    /// Whether the token of fingerprint `print` was accepted before (and could still
    /// pass the time check).
    fn spent(&self, print: &[u8; 32], now: i64) -> bool {
        let accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        accepted.get(print).is_some_and(|&until| until >= now)
    }

    /// Remembers an accepted token until no time it can carry passes the skew check;
    /// false if it was remembered already.
    fn spend(&self, print: [u8; 32], now: i64) -> bool {
        let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        // What can no longer pass is forgotten; the rest are bounded by the budgets.
        accepted.retain(|_, until| *until >= now);
        let until = now.saturating_add(self.skew.saturating_mul(2));
        accepted.insert(print, until).is_none()
    }

    /// A new ticket for `source`, which admits its echo and load connections for
    /// [`TICKET_LIFETIME_SECS`].
    pub(super) fn issue_ticket(&self, source: IpAddr) -> [u8; TICKET_LEN] {
        let mut ticket = [0u8; TICKET_LEN];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut ticket);
        let now = Instant::now();
        let mut tickets = self.tickets.lock().unwrap_or_else(PoisonError::into_inner);
        if tickets.len() >= MAX_TICKETS {
            tickets.retain(|_, (_, until)| *until > now);
        }
        if tickets.len() >= MAX_TICKETS {
            let soonest = tickets
                .iter()
                .min_by_key(|(_, (_, until))| *until)
                .map(|(k, _)| *k);
            if let Some(k) = soonest {
                tickets.remove(&k);
            }
        }
        let until = now + Duration::from_secs(TICKET_LIFETIME_SECS);
        tickets.insert(auth::fingerprint(&ticket), (source_key(source), until));
        ticket
    }

    /// Whether `ticket` was issued to `source` and has not expired. A lookup by the
    /// ticket's hash: the time taken says nothing about how much of a guess was right.
    pub(super) fn check_ticket(
        &self,
        ticket: &[u8; TICKET_LEN],
        source: IpAddr,
    ) -> Result<(), AuthError> {
        let tickets = self.tickets.lock().unwrap_or_else(PoisonError::into_inner);
        match tickets.get(&auth::fingerprint(ticket)) {
            Some(&(to, until)) if to == source_key(source) && until > Instant::now() => Ok(()),
            _ => Err(AuthError::Ticket),
        }
    }
}

/// Why a connection's credential did not admit it.
#[derive(Debug)]
pub(super) enum Unadmitted {
    /// The credential could not be read (closed, too slow, malformed): nothing is
    /// answered.
    Unreadable(String),
    /// Read and refused: the client is told it is denied, the log why.
    Refused(String),
}

/// Reads and judges the credential that follows a hello (when `follows`: a version 2
/// hello) of an echo or load connection from `peer`, by `deadline`. A server that does
/// not authenticate admits any connection (reading a credential it is given); one that
/// does admits a valid ticket, or a valid token. True when a token was accepted: the
/// client is then due a ticket ([`ticket_due`]) once the connection has its place.
pub(super) fn admit(
    conn: &mut std::net::TcpStream,
    deadline: crate::control::Deadline,
    follows: bool,
    auth: Option<&ServerAuth>,
    peer: std::net::SocketAddr,
) -> Result<bool, Unadmitted> {
    use flowlab_proto::credential::Credential;
    let credential = if follows {
        Credential::read(|buf: &mut [u8]| crate::control::read_exact_by(conn, buf, deadline))
            .map_err(|e| Unadmitted::Unreadable(e.to_string()))?
            .map_err(|e| Unadmitted::Unreadable(e.to_string()))?
    } else {
        Credential::None
    };
    let Some(auth) = auth else {
        return Ok(false);
    };
    let refused = |e: AuthError| Unadmitted::Refused(format!("authentication failed: {e}"));
    match credential {
        Credential::None => Err(Unadmitted::Refused(
            "authentication failed: no credentials (the server authenticates its clients)".into(),
        )),
        Credential::Ticket(k) => auth
            .check_ticket(&k, peer.ip())
            .map(|()| false)
            .map_err(refused),
        Credential::Token(t) => auth
            .check(Some(&t), peer.ip())
            .map(|_user| true)
            .map_err(refused),
    }
}

/// The ticket a connection admitted by a token is given (see [`admit`]), issued only
/// now that the connection is served.
pub(super) fn ticket_due(
    token_accepted: bool,
    auth: Option<&ServerAuth>,
    peer: std::net::SocketAddr,
) -> Option<[u8; TICKET_LEN]> {
    auth.filter(|_| token_accepted)
        .map(|a| a.issue_ticket(peer.ip()))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(per_second: u32, per_source: u32) -> (ServerAuth, rsa::RsaPublicKey) {
        let key = RsaPrivateKey::new(&mut rand_core::OsRng, 1024).expect("a key");
        let public = key.to_public_key();
        let users = AuthorizedUsers::parse(&format!(
            "mario,{}\n",
            auth::password_hash("mario", "rossi")
        ));
        let a = ServerAuth::new(
            key,
            users,
            Padding::Oaep,
            Duration::from_secs(10),
            per_second,
            per_source,
        );
        (a, public)
    }

    fn token(public: &rsa::RsaPublicKey, password: &str) -> String {
        auth::encode_token(
            public,
            Padding::Oaep,
            "mario",
            password,
            unix_now(),
            &mut rand_core::OsRng,
        )
        .expect("a token")
    }

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    #[test]
    fn a_token_is_accepted_once() {
        let (a, public) = server(20, 5);
        let t = token(&public, "rossi");
        assert_eq!(a.check(Some(&t), A), Ok("mario".into()));
        assert_eq!(a.check(Some(&t), A), Err(AuthError::Replayed));
        assert_eq!(a.check(Some(&t), B), Err(AuthError::Replayed));
        // Another token of the same user, the same second, is another ciphertext.
        assert_eq!(
            a.check(Some(&token(&public, "rossi")), A),
            Ok("mario".into())
        );
    }

    #[test]
    fn what_cannot_be_a_token_spends_no_budget() {
        let (a, public) = server(20, 1);
        for _ in 0..100 {
            assert_eq!(a.check(None, A), Err(AuthError::NoToken));
            assert_eq!(a.check(Some("!!"), A), Err(AuthError::NotBase64));
            assert_eq!(a.check(Some("AAAA"), A), Err(AuthError::Decrypt));
        }
        assert_eq!(
            a.check(Some(&token(&public, "rossi")), A),
            Ok("mario".into())
        );
    }

    #[test]
    fn one_source_spends_its_own_budget_not_the_servers() {
        let (a, public) = server(20, 1);
        // A source's burst is four seconds' worth: four wrong passwords, then refused
        // unread.
        for _ in 0..4 {
            let wrong = token(&public, "verdi");
            assert_eq!(
                a.check(Some(&wrong), A),
                Err(AuthError::Denied("mario".into()))
            );
        }
        let refused = token(&public, "rossi");
        assert_eq!(
            a.check(Some(&refused), A),
            Err(AuthError::SourceRateLimited)
        );
        assert_eq!(
            a.check(Some(&token(&public, "rossi")), B),
            Ok("mario".into())
        );
    }

    #[test]
    fn a_ticket_admits_its_source_only() {
        let (a, _) = server(20, 5);
        let k = a.issue_ticket(A);
        assert_eq!(a.check_ticket(&k, A), Ok(()));
        assert_eq!(a.check_ticket(&k, A), Ok(()), "any number of connections");
        assert_eq!(a.check_ticket(&k, B), Err(AuthError::Ticket));
        assert_eq!(a.check_ticket(&[0; TICKET_LEN], A), Err(AuthError::Ticket));
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let k6 = a.issue_ticket(v6);
        let same_64: IpAddr = "2001:db8::2".parse().unwrap();
        assert_eq!(a.check_ticket(&k6, same_64), Ok(()));
    }
}
