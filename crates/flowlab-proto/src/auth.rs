//! iperf3's authentication, byte for byte: the token a client puts in its parameters
//! (`authtoken`), and the server's check of it against an authorized-users file.
//!
//! The client writes `user: NAME\npwd:  PASSWORD\nts:   UNIXSECONDS` (one space after
//! `user:`, two after `pwd:`, three after `ts:`), encrypts it with the server's RSA public
//! key — RSA-OAEP (SHA-1, as OpenSSL's default, iperf3 ≥ 3.17) or PKCS#1 v1.5 (iperf3 ≤
//! 3.16, `--use-pkcs1-padding`) — and sends it base64-encoded on one line. The server
//! decrypts it, refuses a timestamp further than its skew threshold from its own clock,
//! and looks the user up in a file of `user,hex(SHA-256("{user}password"))` lines (`#`
//! comments and lines without a comma skipped).
//!
//! No I/O here: keys and files arrive as text, the clock as a number, randomness as an
//! argument. The RSA arithmetic is RustCrypto's `rsa`, which carries the Marvin timing
//! advisory (RUSTSEC-2023-0071) for decryption; docs/SECURITY.md says what the server does
//! about it.

use base64::Engine;
use rsa::pkcs1::{DecodeRsaPrivateKey, DecodeRsaPublicKey};
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey};
use rsa::rand_core::CryptoRngCore;
use rsa::{Oaep, Pkcs1v15Encrypt, RsaPrivateKey, RsaPublicKey};
use sha2::{Digest, Sha256};

/// Why authentication failed. The peer is told only "authentication failed"; the server's
/// log gets this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("no authentication token in the parameters")]
    NoToken,
    #[error("the token is not base64")]
    NotBase64,
    #[error("the token does not decrypt with the server's key (wrong key or padding)")]
    Decrypt,
    #[error("the decrypted token is not 'user: … pwd: … ts: …'")]
    Format,
    #[error(
        "the token's time is {0} s away from the server's clock (more than the skew threshold)"
    )]
    Skew(i64),
    #[error("user '{0}' is not authorized, or the password is wrong")]
    Denied(String),
    #[error(
        "too many authentication attempts server-wide (--auth-rate); this one was not decrypted"
    )]
    RateLimited,
    #[error(
        "too many authentication attempts from this address (--auth-rate-per-source); this one was not decrypted"
    )]
    SourceRateLimited,
    #[error("the token was used before (a replay)")]
    Replayed,
    #[error("the ticket is unknown, expired, or was issued to another address")]
    Ticket,
}

/// Which RSA padding the token is encrypted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// RSA-OAEP with SHA-1 and MGF1-SHA-1 (OpenSSL's `RSA_PKCS1_OAEP_PADDING`): iperf3 3.17
    /// and later.
    Oaep,
    /// PKCS#1 v1.5: iperf3 3.16 and older (Debian bookworm's 3.12).
    Pkcs1v15,
}

/// A key file's text was not an RSA key in PEM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not an RSA {0} key in PEM (PKCS#8 or PKCS#1), as `openssl genrsa` and `openssl rsa -pubout` write"
)]
pub struct KeyError(&'static str);

/// An RSA public key from PEM text: `-----BEGIN PUBLIC KEY-----` (SubjectPublicKeyInfo,
/// `openssl rsa -pubout`) or `-----BEGIN RSA PUBLIC KEY-----` (PKCS#1).
pub fn public_key_from_pem(text: &str) -> Result<RsaPublicKey, KeyError> {
    RsaPublicKey::from_public_key_pem(text.trim())
        .or_else(|_| RsaPublicKey::from_pkcs1_pem(text.trim()))
        .map_err(|_| KeyError("public"))
}

/// An RSA private key from PEM text: `-----BEGIN PRIVATE KEY-----` (PKCS#8, OpenSSL 3's
/// `genrsa`) or `-----BEGIN RSA PRIVATE KEY-----` (PKCS#1). Encrypted keys are refused.
pub fn private_key_from_pem(text: &str) -> Result<RsaPrivateKey, KeyError> {
    RsaPrivateKey::from_pkcs8_pem(text.trim())
        .or_else(|_| RsaPrivateKey::from_pkcs1_pem(text.trim()))
        .map_err(|_| KeyError("private"))
}

/// The plain text of a token.
pub fn token_text(user: &str, password: &str, unix_seconds: i64) -> String {
    format!("user: {user}\npwd:  {password}\nts:   {unix_seconds}")
}

/// The user, password and time of a token's plain text, read as iperf3's `sscanf` does
/// (whitespace-separated words after each label).
pub fn parse_token_text(text: &str) -> Result<(String, String, i64), AuthError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["user:", user, "pwd:", password, "ts:", ts, ..] => {
            let ts = ts.parse::<i64>().map_err(|_| AuthError::Format)?;
            Ok((user.to_string(), password.to_string(), ts))
        }
        _ => Err(AuthError::Format),
    }
}

/// A client's token: the plain text encrypted with the server's public key, base64.
pub fn encode_token(
    key: &RsaPublicKey,
    padding: Padding,
    user: &str,
    password: &str,
    unix_seconds: i64,
    rng: &mut impl CryptoRngCore,
) -> Result<String, rsa::Error> {
    let text = token_text(user, password, unix_seconds);
    let sealed = match padding {
        Padding::Oaep => key.encrypt(rng, Oaep::new::<sha1::Sha1>(), text.as_bytes())?,
        Padding::Pkcs1v15 => key.encrypt(rng, Pkcs1v15Encrypt, text.as_bytes())?,
    };
    Ok(base64::engine::general_purpose::STANDARD.encode(sealed))
}

/// A token's ciphertext, or why it cannot be one for a key of `key_len` bytes — a check
/// that costs no decryption.
pub fn sealed_of(token: &str, key_len: usize) -> Result<Vec<u8>, AuthError> {
    let sealed = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .map_err(|_| AuthError::NotBase64)?;
    if sealed.len() != key_len {
        return Err(AuthError::Decrypt);
    }
    Ok(sealed)
}

/// SHA-256 of `bytes`: what a server remembers of a token it accepted (its ciphertext)
/// or a ticket it issued, so that neither is kept in the clear.
pub fn fingerprint(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The user, password and time in a token. The decryption is blinded with `rng`: its
/// timing does not follow the ciphertext the peer chose.
pub fn decode_token(
    key: &RsaPrivateKey,
    padding: Padding,
    token: &str,
    rng: &mut impl CryptoRngCore,
) -> Result<(String, String, i64), AuthError> {
    let sealed = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .map_err(|_| AuthError::NotBase64)?;
    let plain = match padding {
        Padding::Oaep => key.decrypt_blinded(rng, Oaep::new::<sha1::Sha1>(), &sealed),
        Padding::Pkcs1v15 => key.decrypt_blinded(rng, Pkcs1v15Encrypt, &sealed),
    }
    .map_err(|_| AuthError::Decrypt)?;
    let text = std::str::from_utf8(&plain).map_err(|_| AuthError::Format)?;
    parse_token_text(text)
}

/// hex(SHA-256("{user}password")): what an authorized-users file holds for a user.
pub fn password_hash(user: &str, password: &str) -> String {
    let digest = Sha256::digest(format!("{{{user}}}{password}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// An authorized-users file: `user,hash` lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizedUsers {
    users: Vec<(String, String)>,
}

impl AuthorizedUsers {
    /// Reads the file's text as iperf3 does: each line up to its first `\r` or `\n`;
    /// empty lines, lines starting with `#` and lines without a comma skipped; the user
    /// is the text before the first comma, the hash the text up to the next one.
    pub fn parse(text: &str) -> AuthorizedUsers {
        let users = text
            .split('\n')
            .map(|l| l.split('\r').next().unwrap_or(""))
            .filter(|l| !l.is_empty() && !l.starts_with('#') && l.contains(','))
            .filter_map(|l| {
                let mut parts = l.split(',').filter(|p| !p.is_empty());
                Some((parts.next()?.to_string(), parts.next()?.to_string()))
            })
            .collect();
        AuthorizedUsers { users }
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `user` with `password` is in the file. Every line is compared, in full, so
    /// the time taken does not say where a match was or how much of a hash agreed.
    pub fn allows(&self, user: &str, password: &str) -> bool {
        let hash = password_hash(user, password);
        self.users.iter().fold(false, |found, (u, h)| {
            let same = u.len() == user.len()
                && h.len() == hash.len()
                && u.bytes()
                    .zip(user.bytes())
                    .fold(0u8, |d, (a, b)| d | (a ^ b))
                    == 0
                && h.bytes()
                    .zip(hash.bytes())
                    .fold(0u8, |d, (a, b)| d | (a ^ b))
                    == 0;
            found | same
        })
    }
}

/// The server's whole check of a token at `now` (Unix seconds); `rng` blinds the
/// decryption.
pub fn check(
    key: &RsaPrivateKey,
    padding: Padding,
    users: &AuthorizedUsers,
    skew_seconds: i64,
    token: Option<&str>,
    now: i64,
    rng: &mut impl CryptoRngCore,
) -> Result<String, AuthError> {
    let token = token.ok_or(AuthError::NoToken)?;
    let (user, password, ts) = decode_token(key, padding, token, rng)?;
    let off = now.saturating_sub(ts);
    if off.saturating_abs() > skew_seconds {
        return Err(AuthError::Skew(off));
    }
    if !users.allows(&user, &password) {
        return Err(AuthError::Denied(user));
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_text_is_iperf3s_and_reads_back() {
        let t = token_text("mario", "rossi", 1_700_000_000);
        assert_eq!(t, "user: mario\npwd:  rossi\nts:   1700000000");
        assert_eq!(
            parse_token_text(&t),
            Ok(("mario".into(), "rossi".into(), 1_700_000_000))
        );
        for bad in [
            "",
            "user: a\npwd:  b",
            "user: a\npwd:  b\nts:   x",
            "pwd: a user: b ts: 1",
        ] {
            assert_eq!(parse_token_text(bad), Err(AuthError::Format), "{bad:?}");
        }
    }

    #[test]
    fn password_hash_is_sha256_of_the_braced_user_and_password() {
        // printf '%s' '{mario}rossi' | sha256sum
        assert_eq!(
            password_hash("mario", "rossi"),
            "bf7a49a846d44b454a5d11e7acfaf13d138bbe0b7483aa3e050879700572709b"
        );
    }

    #[test]
    fn tokens_round_trip_with_either_padding_and_the_check_judges_them() {
        let mut rng = rand_core::OsRng;
        let key = RsaPrivateKey::new(&mut rng, 1024).expect("a key");
        let public = key.to_public_key();
        let users = AuthorizedUsers::parse(&format!("mario,{}\n", password_hash("mario", "rossi")));
        let now = 1_700_000_000;
        let judge = |padding, token: Option<&str>| {
            check(&key, padding, &users, 10, token, now, &mut rand_core::OsRng)
        };
        for padding in [Padding::Oaep, Padding::Pkcs1v15] {
            let token = |user: &str, pass: &str, ts: i64| {
                encode_token(&public, padding, user, pass, ts, &mut rand_core::OsRng).unwrap()
            };
            let good = token("mario", "rossi", now - 3);
            assert!(!good.contains('\n'), "one line: {good}");
            assert_eq!(judge(padding, Some(&good)), Ok("mario".into()));
            let refused = [
                (
                    Some(token("mario", "verdi", now)),
                    AuthError::Denied("mario".into()),
                ),
                (Some(token("mario", "rossi", now - 11)), AuthError::Skew(11)),
                (None, AuthError::NoToken),
                (Some("!!".into()), AuthError::NotBase64),
            ];
            for (t, why) in refused {
                assert_eq!(judge(padding, t.as_deref()), Err(why));
            }
            // The other padding never yields the token: it does not decrypt, or (about
            // once in 700 OAEP ciphertexts, whose bytes happen to look like PKCS#1 v1.5
            // padding) it "decrypts" to bytes that are no token.
            let other = if padding == Padding::Oaep {
                Padding::Pkcs1v15
            } else {
                Padding::Oaep
            };
            let wrong = judge(other, Some(&good));
            assert!(
                matches!(wrong, Err(AuthError::Decrypt | AuthError::Format)),
                "{padding:?} read as {other:?}: {wrong:?}"
            );
        }
    }

    #[test]
    fn authorized_users_file_is_read_as_iperf3_reads_it() {
        let file = format!(
            "# a comment,with a comma\r\n\nmario,{}\r\nnocomma\nluigi,{},extra\n",
            password_hash("mario", "rossi"),
            password_hash("luigi", "verdi"),
        );
        let u = AuthorizedUsers::parse(&file);
        assert_eq!(u.len(), 2);
        assert!(u.allows("mario", "rossi"));
        assert!(u.allows("luigi", "verdi"));
        assert!(!u.allows("mario", "verdi"));
        assert!(!u.allows("mari", "rossi"));
        assert!(!u.allows("# a comment", "with a comma"));
    }
}
