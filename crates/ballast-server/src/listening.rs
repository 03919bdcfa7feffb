//! The TCP sockets listening on an address, as the kernel lists them in
//! `/proc/net/tcp` and `/proc/net/tcp6`: how the gateway learns that its
//! reuseport group holds its own sockets alone.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// `st` of a listening socket in `/proc/net/tcp*`.
const LISTEN: &str = "0A";

/// How many sockets of this network namespace listen on `addr`; `None`
/// where the kernel does not list them (no `/proc`, another system).
pub(crate) fn count(addr: SocketAddr) -> io::Result<Option<usize>> {
    let table = match addr {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    match std::fs::read_to_string(table) {
        Ok(text) => Ok(Some(text.lines().skip(1).filter(|line| listens_on(line, addr)).count())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a line of `/proc/net/tcp*` is a socket listening on `addr`.
fn listens_on(line: &str, addr: SocketAddr) -> bool {
    let mut fields = line.split_whitespace().skip(1);
    let (Some(local), Some(_remote), Some(state)) = (fields.next(), fields.next(), fields.next()) else {
        return false;
    };
    state == LISTEN && local_addr(local) == Some(addr)
}

/// `0100007F:1F90` (the address as the kernel's native words in hex, the
/// port in hex) as an address.
fn local_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words = (0..ip.len() / 8)
        .map(|i| ip.get(i * 8..i * 8 + 8).and_then(|w| u32::from_str_radix(w, 16).ok()))
        .collect::<Option<Vec<u32>>>()?;
    let octets: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip = match octets.len() {
        4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(octets).ok()?)),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(octets).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_read_from_the_kernel_s_table() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert_eq!(count(addr).unwrap(), Some(1));
        let _client = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(count(addr).unwrap(), Some(1), "a connection is not a listener");
        drop(listener);
        assert_eq!(count(addr).unwrap(), Some(0));
    }

    #[test]
    fn a_line_names_its_address_and_state() {
        let line = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000  0 1 1";
        let addr: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(listens_on(line, addr), cfg!(target_endian = "little"));
        assert!(!listens_on(&line.replace(" 0A ", " 01 "), addr), "an established connection");
        assert!(!listens_on("garbage", addr));
    }
}
