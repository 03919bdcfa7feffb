//! Tokens for listeners that leave the host: a listener bound to anything but
//! loopback must ask every request for `Authorization: Bearer <token>`, the
//! token read from an environment variable the configuration names (never
//! written in the file itself).

use std::net::SocketAddr;

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use subtle::ConstantTimeEq;

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

/// A secret every request must present; compared in constant time.
#[derive(Clone)]
pub struct Token(Box<[u8]>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

impl Token {
    /// A token with this value (for tests and embedding; `ballast serve` reads it
    /// with [`for_listener`](Self::for_listener)).
    pub fn new(value: impl AsRef<[u8]>) -> Self {
        Self(value.as_ref().into())
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
                Ok(value) if value.len() >= MIN_TOKEN_LEN => Ok(Some(Token::new(value))),
                Ok(value) if !value.is_empty() => {
                    Err(TokenError::TooShort { section, var: var.to_owned(), min: MIN_TOKEN_LEN })
                }
                _ => Err(TokenError::Missing { section, var: var.to_owned() }),
            },
        }
    }

    /// Whether `presented` is this token, in time that does not depend on
    /// where they differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.ct_eq(presented))
    }

    /// Whether `headers` carry `Authorization: Bearer <this token>`.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
        bearer.is_some_and(|presented| self.matches(presented.trim().as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_checked_and_required_beyond_loopback() {
        let token = Token::new("s3cret");
        let mut headers = HeaderMap::new();
        assert!(!token.admits(&headers));
        headers.insert(AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(token.admits(&headers));
        headers.insert(AUTHORIZATION, "Bearer s3cre".parse().unwrap());
        assert!(!token.admits(&headers));
        headers.insert(AUTHORIZATION, "Basic s3cret".parse().unwrap());
        assert!(!token.admits(&headers));
        assert_eq!(format!("{token:?}"), "Token(***)");

        let local: SocketAddr = "127.0.0.1:9465".parse().unwrap();
        let public: SocketAddr = "0.0.0.0:9465".parse().unwrap();
        assert!(Token::for_listener("gateway", local, None).unwrap().is_none());
        assert!(matches!(Token::for_listener("gateway", public, None), Err(TokenError::Required { .. })));
        let missing = Token::for_listener("gateway", public, Some("BALLAST_TEST_SURELY_UNSET_VAR"));
        assert!(matches!(missing, Err(TokenError::Missing { .. })));
    }
}
