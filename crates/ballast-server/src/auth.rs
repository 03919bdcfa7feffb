//! Tokens for listeners that leave the host: a listener bound to anything but
//! loopback must ask every request for `Authorization: Bearer <token>`, the
//! token read from an environment variable the configuration names (never
//! written in the file itself).
//!
//! **Guessing is throttled, for every way a token is presented** — the
//! dashboard's login form, a bearer token on `/ui`, `/metrics` or the
//! gateway: each check goes through the token's one [`Token::check`], which
//! counts only wrong tokens, in two GCRA buckets:
//!
//! - per client address ([`PEER_BURST`] wrong tokens at once, then one every
//!   [`PEER_EVERY`]; IPv6 addresses by their /64, which one host controls
//!   whole), so one client cannot guess quickly;
//! - per listener ([`LISTENER_BURST`], then one every [`LISTENER_EVERY`]),
//!   so rotating through addresses does not help either.
//!
//! An address over its own bucket is answered 429 with `Retry-After` before
//! its token is compared. Every other token is compared — in constant time —
//! before the listener's bucket is asked: the right token always gets in,
//! from any address, however many others guess meanwhile (a flood cannot
//! lock an operator out), and spends nothing; a wrong one over the
//! listener's bucket is answered 429 too, slowing the flood. A token of
//! [`MIN_TOKEN_LEN`] random bytes is out of a guesser's reach at any rate:
//! the buckets keep the guessing slow and cheap. Every refusal is counted in
//! `ballast_auth_failures_total{listener, reason}` (`wrong_token`,
//! `missing_token`, `throttled`), not logged line by line.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use subtle::ConstantTimeEq;

/// Wrong tokens a client address may present at once.
pub const PEER_BURST: u32 = 5;

/// How often a client address may present a wrong token once its burst is spent.
pub const PEER_EVERY: Duration = Duration::from_secs(6);

/// Wrong tokens a listener takes at once, from every address together.
pub const LISTENER_BURST: u32 = 50;

/// How often a listener takes a wrong token once its burst is spent.
pub const LISTENER_EVERY: Duration = Duration::from_millis(100);

/// The counter of refused token checks, by listener and reason.
pub const AUTH_FAILURES: &str = "ballast_auth_failures_total";

/// Entries the per-address maps hold before the stale ones are dropped.
const PRUNE_AT: usize = 10_000;

/// Why a listener's token setting cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The listener leaves the host and has no token.
    #[error(
        "[{section}] listens on {addr}, beyond this host, without a token: set `token_env` in [{section}] \
         to the name of an environment variable holding one, or listen on 127.0.0.1"
    )]
    Required {
        /// `serve` or `gateway`.
        section: &'static str,
        /// The address.
        addr: SocketAddr,
    },
    /// The token is too short to resist guessing.
    #[error(
        "[{section}] token_env names {var}, whose token is shorter than {min} bytes: use a random one of \
         at least {min} (e.g. `openssl rand -hex 32`)"
    )]
    TooShort {
        /// `serve` or `gateway`.
        section: &'static str,
        /// The variable.
        var: String,
        /// The shortest token accepted, [`MIN_TOKEN_LEN`].
        min: usize,
    },
    /// The variable `token_env` names is not set, or empty.
    #[error("[{section}] token_env names {var}, which is not set (or empty): export the token in {var}")]
    Missing {
        /// `serve` or `gateway`.
        section: &'static str,
        /// The variable.
        var: String,
    },
}

/// The shortest token a listener accepts, in bytes: a shorter one falls to
/// guessing even at the login's rate limit.
pub const MIN_TOKEN_LEN: usize = 16;

/// A secret every request must present; compared in constant time, every
/// check throttled (see the module docs). Clones share the throttle.
#[derive(Clone)]
pub struct Token {
    secret: Arc<[u8]>,
    guard: Arc<Guard>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// What a token check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The right token.
    Admitted,
    /// No token, or a wrong one.
    Refused,
    /// Too many wrong tokens lately: from this address (its token not
    /// compared), or at this listener (its token compared and wrong); ask
    /// again after this long.
    Throttled(Duration),
}

impl Token {
    /// A token with this value (for tests and embedding; `ballast serve` reads it
    /// with [`for_listener`](Self::for_listener)).
    pub fn new(value: impl AsRef<[u8]>) -> Self {
        Self::on("embedded", value)
    }

    fn on(listener: &'static str, value: impl AsRef<[u8]>) -> Self {
        Self { secret: value.as_ref().into(), guard: Arc::new(Guard::new(listener)) }
    }

    /// The token of a listener at `addr` whose configuration names `token_env`:
    /// `None` on loopback without one; refused beyond the host without one, or
    /// when the variable is unset or empty.
    pub fn for_listener(
        section: &'static str,
        addr: SocketAddr,
        token_env: Option<&str>,
    ) -> Result<Option<Token>, TokenError> {
        match token_env {
            None if addr.ip().is_loopback() => Ok(None),
            None => Err(TokenError::Required { section, addr }),
            Some(var) => match std::env::var(var) {
                Ok(value) if value.len() >= MIN_TOKEN_LEN => Ok(Some(Token::on(section, value))),
                Ok(value) if !value.is_empty() => {
                    Err(TokenError::TooShort { section, var: var.to_owned(), min: MIN_TOKEN_LEN })
                }
                _ => Err(TokenError::Missing { section, var: var.to_owned() }),
            },
        }
    }

    /// Whether `presented` is this token, in time that does not depend on
    /// where they differ. Not throttled: requests go through
    /// [`check`](Self::check).
    fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.secret.ct_eq(presented))
    }

    /// Checks `presented` (none: no token sent) from `peer`, throttled as
    /// the module docs say, and counts a refusal.
    pub fn check(&self, presented: Option<&[u8]>, peer: Option<IpAddr>) -> Check {
        let guard = &self.guard;
        let Some(presented) = presented else {
            // Asking without a token guesses nothing: counted, not throttled.
            guard.count("missing_token");
            return Check::Refused;
        };
        let peer = peer_key(peer);
        let now = guard.now();
        if let Some(wait) = guard.peer_throttled(peer, now) {
            guard.count("throttled");
            return Check::Throttled(wait);
        }
        // Compared before the listener's bucket is asked: others' guessing
        // never holds the right token back.
        if self.matches(presented) {
            return Check::Admitted;
        }
        let listener = guard.listener_throttled(now);
        guard.failed(peer, now);
        match listener {
            Some(wait) => {
                guard.count("throttled");
                Check::Throttled(wait)
            }
            None => {
                guard.count("wrong_token");
                Check::Refused
            }
        }
    }

    /// [`check`](Self::check) of `headers`' `Authorization: Bearer`.
    pub fn check_bearer(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Check {
        self.check(bearer(headers), peer)
    }
}

/// The token of `Authorization: Bearer <token>`, if sent.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim().as_bytes())
}

/// The client address of a request a [`listener`](crate::listener) served.
pub fn peer<B>(request: &axum::http::Request<B>) -> Option<IpAddr> {
    request.extensions().get::<axum::extract::ConnectInfo<SocketAddr>>().map(|info| info.0.ip())
}

/// An address as the throttle keys it: IPv4 as is (also when mapped into
/// IPv6), IPv6 by its /64; `0` for a request whose address is unknown.
pub(crate) fn peer_key(peer: Option<IpAddr>) -> u128 {
    match peer.map(|ip| ip.to_canonical()) {
        Some(IpAddr::V4(v4)) => u128::from(u32::from(v4)),
        Some(IpAddr::V6(v6)) => u128::from(v6) & !u128::from(u64::MAX),
        None => 0,
    }
}

/// The throttle of one listener's token checks: GCRA buckets that count
/// wrong tokens only, per address and for the listener.
struct Guard {
    listener: &'static str,
    start: Instant,
    /// When each address's next wrong token is due, ns since `start`.
    peers: Mutex<HashMap<u128, u64>>,
    /// The same for the whole listener.
    all: AtomicU64,
}

impl Guard {
    fn new(listener: &'static str) -> Self {
        Self { listener, start: Instant::now(), peers: Mutex::default(), all: AtomicU64::new(0) }
    }

    fn now(&self) -> u64 {
        nanos(self.start.elapsed())
    }

    /// How long `peer` must wait before a token of its is compared, if it must.
    fn peer_throttled(&self, peer: u128, now: u64) -> Option<Duration> {
        let own = self.peers.lock().unwrap_or_else(PoisonError::into_inner).get(&peer).copied();
        wait(own.unwrap_or(0), now, PEER_BURST, PEER_EVERY)
    }

    /// How long the listener holds wrong tokens back, if it does.
    fn listener_throttled(&self, now: u64) -> Option<Duration> {
        wait(self.all.load(Ordering::Acquire), now, LISTENER_BURST, LISTENER_EVERY)
    }

    /// A wrong token from `peer`: both buckets move on.
    fn failed(&self, peer: u128, now: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if peers.len() >= PRUNE_AT {
            peers.retain(|_, tat| *tat > now);
        }
        let tat = peers.entry(peer).or_insert(0);
        *tat = (*tat).max(now) + nanos(PEER_EVERY);
        drop(peers);
        let _ = self.all.fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
            Some(tat.max(now) + nanos(LISTENER_EVERY))
        });
    }

    fn count(&self, reason: &'static str) {
        metrics::counter!(AUTH_FAILURES, "listener" => self.listener, "reason" => reason).increment(1);
    }
}

/// How long until a bucket whose next failure is due at `tat` takes one,
/// with `burst` at once and one every `every`; `None` if it takes one now.
fn wait(tat: u64, now: u64, burst: u32, every: Duration) -> Option<Duration> {
    let tolerance = nanos(every) * u64::from(burst.max(1) - 1);
    let due = tat.saturating_sub(tolerance);
    (due > now).then(|| Duration::from_nanos(due - now))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_checked_and_required_beyond_loopback() {
        let token = Token::new("s3cret");
        let mut headers = HeaderMap::new();
        let peer = Some(IpAddr::from([10, 0, 0, 1]));
        assert_eq!(token.check_bearer(&headers, peer), Check::Refused);
        headers.insert(AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert_eq!(token.check_bearer(&headers, peer), Check::Admitted);
        headers.insert(AUTHORIZATION, "Bearer s3cre".parse().unwrap());
        assert_eq!(token.check_bearer(&headers, peer), Check::Refused);
        headers.insert(AUTHORIZATION, "Basic s3cret".parse().unwrap());
        assert_eq!(token.check_bearer(&headers, peer), Check::Refused);
        assert_eq!(format!("{token:?}"), "Token(***)");

        let local: SocketAddr = "127.0.0.1:9465".parse().unwrap();
        let public: SocketAddr = "0.0.0.0:9465".parse().unwrap();
        assert!(Token::for_listener("gateway", local, None).unwrap().is_none());
        assert!(matches!(Token::for_listener("gateway", public, None), Err(TokenError::Required { .. })));
        let missing = Token::for_listener("gateway", public, Some("BALLAST_TEST_SURELY_UNSET_VAR"));
        assert!(matches!(missing, Err(TokenError::Missing { .. })));
    }

    /// N7, R9: wrong tokens are throttled per address (an IPv6 /64 is one)
    /// and per listener; the right token spends nothing and is never held
    /// back by others' guessing.
    #[test]
    fn guessing_is_throttled_per_address_and_per_listener_and_the_operator_gets_in() {
        let token = Token::new("the-right-token-0123");
        let check = |peer: IpAddr, presented: &str| token.check(Some(presented.as_bytes()), Some(peer));
        let guesser = IpAddr::from([10, 0, 0, 9]);
        for _ in 0..PEER_BURST {
            assert_eq!(check(guesser, "guess"), Check::Refused);
        }
        assert!(matches!(check(guesser, "guess"), Check::Throttled(_)), "one address guesses slowly");
        assert!(
            matches!(check(guesser, "the-right-token-0123"), Check::Throttled(_)),
            "its own guessing holds it"
        );
        let v6 = |last: u16| IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, last]);
        for last in 0..PEER_BURST as u16 {
            assert_eq!(check(v6(last), "guess"), Check::Refused);
        }
        assert!(matches!(check(v6(999), "guess"), Check::Throttled(_)), "a /64 is one address");

        let operator = IpAddr::from([10, 0, 0, 1]);
        assert_eq!(check(operator, "the-right-token-0123"), Check::Admitted);
        for n in 0..LISTENER_BURST {
            let _ = check(IpAddr::from([10, 1, (n / 256) as u8, n as u8]), "guess");
        }
        assert!(
            matches!(check(IpAddr::from([10, 2, 0, 1]), "guess"), Check::Throttled(_)),
            "rotating addresses does not help"
        );
        assert_eq!(
            check(IpAddr::from([10, 2, 0, 2]), "the-right-token-0123"),
            Check::Admitted,
            "the right token from a new address gets in while guessing goes on"
        );
        assert_eq!(
            check(operator, "the-right-token-0123"),
            Check::Admitted,
            "the operator is not locked out"
        );
        assert_eq!(token.check(None, Some(guesser)), Check::Refused, "no token: refused, not throttled");
    }
}
