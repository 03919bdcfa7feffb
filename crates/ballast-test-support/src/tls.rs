//! The TLS side of a test upstream: its certificate, the CA whose client
//! certificates it admits, and HTTP/2 by ALPN.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::pki::Issued;

/// How an HTTPS upstream serves.
#[derive(Clone)]
pub struct ServerTls {
    /// Its certificate and key (from a test [`Ca`](crate::pki::Ca)).
    pub identity: Issued,
    /// When set, the CA (PEM) whose client certificates it requires: a
    /// client without one is refused in the handshake.
    pub client_ca: Option<String>,
    /// Whether it offers HTTP/2 by ALPN (besides HTTP/1.1).
    pub http2: bool,
}

impl ServerTls {
    /// Serves `identity`, no client certificate asked, HTTP/1.1 only.
    pub fn new(identity: Issued) -> Self {
        ServerTls { identity, client_ca: None, http2: false }
    }

    /// Requires a client certificate signed by the CA `ca_pem`.
    #[must_use]
    pub fn require_client_cert(mut self, ca_pem: String) -> Self {
        self.client_ca = Some(ca_pem);
        self
    }

    /// Offers HTTP/2 by ALPN.
    #[must_use]
    pub fn http2(mut self) -> Self {
        self.http2 = true;
        self
    }

    /// The rustls acceptor of these settings, for a server of a test's own.
    ///
    /// # Panics
    ///
    /// When the certificate or the CA is unusable.
    pub fn tls_acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                    roots.add(cert.expect("a CA certificate")).expect("a usable CA");
                }
                let verifier =
                    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .expect("a client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let chain = CertificateDer::pem_slice_iter(self.identity.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("the server certificate");
        let key = PrivateKeyDer::from_pem_slice(self.identity.key_pem.as_bytes()).expect("the server key");
        let mut config = builder.with_single_cert(chain, key).expect("a server certificate and its key");
        config.alpn_protocols =
            if self.http2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    /// The acceptor of these settings.
    pub(crate) fn acceptor(&self) -> Acceptor {
        Acceptor(self.tls_acceptor())
    }
}

/// Accepts TLS on connections.
#[derive(Clone)]
pub(crate) struct Acceptor(tokio_rustls::TlsAcceptor);

impl Acceptor {
    /// The handshake on `stream`: the connection, the subject of the client
    /// certificate presented, and whether HTTP/2 was agreed. `None` when the
    /// handshake failed (a client that does not trust the server, a client
    /// certificate missing or refused).
    pub(crate) async fn accept(&self, stream: TcpStream) -> Option<(Accepted, Option<String>, bool)> {
        let handshake = tokio::time::timeout(Duration::from_secs(10), self.0.accept(stream)).await;
        let tls = handshake.ok()?.ok()?;
        let (_, session) = tls.get_ref();
        let client = session.peer_certificates().and_then(|chain| chain.first()).and_then(|cert| {
            x509_parser::parse_x509_certificate(cert).ok().map(|(_, c)| c.subject().to_string())
        });
        let http2 = session.alpn_protocol() == Some(b"h2");
        Some((Accepted::Tls(Box::new(tls)), client, http2))
    }
}

/// A connection, in clear or over TLS.
pub(crate) enum Accepted {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for Accepted {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Accepted::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Accepted::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Accepted::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Plain(s) => Pin::new(s).poll_flush(cx),
            Accepted::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Accepted::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
