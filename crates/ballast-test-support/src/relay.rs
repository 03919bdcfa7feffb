//! A TCP relay in front of a service (a database, an upstream) that a test
//! can cut and restore: what the processes behind it see as the service
//! going away — connections reset, new ones closed at once — and coming
//! back, without touching the service, which other tests share. Or
//! partition: every connection held open and silent, as behind a firewall
//! that drops packets, until it is restored.

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
    silent: Arc<AtomicBool>,
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
        let silent = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0u64);
        let (open, quiet, sender) = (Arc::clone(&cut), Arc::clone(&silent), cuts.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut cut_now = sender.subscribe();
                if quiet.load(Ordering::Acquire) {
                    // Partitioned: held open, never answered, until restored.
                    tokio::spawn(async move {
                        let _held = client;
                        let _ = cut_now.changed().await;
                    });
                    continue;
                }
                if open.load(Ordering::Acquire) {
                    // Cut: closed at once, as a service that is down.
                    drop(client);
                    continue;
                }
                let quiet = Arc::clone(&quiet);
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else { return };
                    let mut client = client;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut_now.changed() => {
                            if quiet.load(Ordering::Acquire) {
                                // Silent until the relay changes again.
                                let _ = cut_now.changed().await;
                            }
                        }
                    }
                });
            }
        });
        Relay { addr, cut, silent, cuts, accept }
    }

    /// Cuts the relay: every connection through it ends, new ones are closed.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Partitions the relay: every connection, open or new, is held and
    /// goes silent — what a client sees of a database behind a firewall
    /// that drops its packets: it waits, not fails.
    pub fn partition(&self) {
        self.silent.store(true, Ordering::Release);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Relays again (the connections held by a partition are closed).
    pub fn restore(&self) {
        self.cut.store(false, Ordering::Release);
        self.silent.store(false, Ordering::Release);
        self.cuts.send_modify(|n| *n += 1);
    }
}
