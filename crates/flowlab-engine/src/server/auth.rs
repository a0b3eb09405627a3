//! A server that authenticates its clients as iperf3 does (see `flowlab_proto::auth`):
//! the key and the users, the skew allowed, and a limit on how many tokens it decrypts a
//! second — RSA decryption leaks timing (the Marvin attack needs many thousands of
//! decryptions), and a flood of tokens would otherwise cost a decryption each.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use flowlab_proto::auth::{self, AuthError, AuthorizedUsers, Padding};
use rsa::RsaPrivateKey;

/// How the server authenticates. Its `Debug` shows neither the key nor the users.
pub struct ServerAuth {
    key: RsaPrivateKey,
    users: AuthorizedUsers,
    padding: Padding,
    /// Seconds a token's time may differ from the server's clock.
    skew: i64,
    /// Tokens decrypted per second at most, server-wide.
    per_second: u32,
    window: Mutex<(Instant, u32)>,
}

impl std::fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAuth")
            .field("users", &self.users.len())
            .field("padding", &self.padding)
            .field("skew", &self.skew)
            .field("per_second", &self.per_second)
            .finish_non_exhaustive()
    }
}

impl ServerAuth {
    pub fn new(
        key: RsaPrivateKey,
        users: AuthorizedUsers,
        padding: Padding,
        skew: Duration,
        per_second: u32,
    ) -> ServerAuth {
        ServerAuth {
            key,
            users,
            padding,
            skew: i64::try_from(skew.as_secs()).unwrap_or(i64::MAX),
            per_second,
            window: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Checks a client's token; the user's name when it passes.
    pub(super) fn check(&self, token: Option<&str>) -> Result<String, AuthError> {
        {
            let mut w = self.window.lock().map_err(|_| AuthError::RateLimited)?;
            if w.0.elapsed() >= Duration::from_secs(1) {
                *w = (Instant::now(), 0);
            }
            if w.1 >= self.per_second {
                return Err(AuthError::RateLimited);
            }
            w.1 += 1;
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        auth::check(&self.key, self.padding, &self.users, self.skew, token, now)
    }
}
