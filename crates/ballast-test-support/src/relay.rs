//! A TCP relay in front of a service (a database, an upstream) that a test
//! can cut and restore: what the processes behind it see as the service
//! going away — connections reset, new ones closed at once — and coming
//! back, without touching the service, which other tests share.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A relay to a target address; stops when dropped.
pub struct Relay {
    /// Where it listens: give this address to the processes under test.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Relay {
    /// Relays a free loopback port to `target`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let cut = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0u64);
        let (open, sender) = (Arc::clone(&cut), cuts.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if open.load(Ordering::Acquire) {
                    // Cut: closed at once, as a service that is down.
                    drop(client);
                    continue;
                }
                let mut cut_now = sender.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else { return };
                    let mut client = client;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut_now.changed() => {}
                    }
                });
            }
        });
        Relay { addr, cut, cuts, accept }
    }

    /// Cuts the relay: every connection through it ends, new ones are closed.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Relays again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::Release);
    }
}
