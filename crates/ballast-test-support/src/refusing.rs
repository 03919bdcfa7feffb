//! A loopback address where every connection is refused.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// A loopback port that is bound and never listened on: a connection to it
/// is refused at once, and while this value lives the port cannot be handed
/// to anyone else. (A port taken from the OS and closed again can: another
/// test's listener, or the server under test, may be given it a moment
/// later, and a "refused" connection then reaches it.)
///
/// ```
/// let refusing = ballast_test_support::Refusing::new();
/// assert!(std::net::TcpStream::connect(refusing.addr).is_err());
/// ```
#[derive(Debug)]
pub struct Refusing {
    /// The address.
    pub addr: SocketAddr,
    _socket: Socket,
}

impl Refusing {
    /// Binds a port on 127.0.0.1, without listening on it.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub fn new() -> Self {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("a TCP socket");
        socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("a loopback port");
        let addr = socket.local_addr().expect("its address").as_socket().expect("an IP address");
        Self { addr, _socket: socket }
    }
}

impl Default for Refusing {
    fn default() -> Self {
        Self::new()
    }
}
