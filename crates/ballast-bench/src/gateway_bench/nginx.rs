//! nginx as the reference hop: `proxy_pass` to the same upstream, run as a
//! child process from a configuration generated in a temp dir, so that it
//! writes nothing outside it (its pid file, error log and temp paths are all
//! there; `-e` keeps even the log opened before the configuration is read
//! out of `/var/log/nginx`).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The path prefix nginx strips before passing a request on, as the
/// gateway strips `/call/{system}`.
pub const PREFIX: &str = "/call/up/";

/// How long nginx may take to start or stop.
const PATIENCE: Duration = Duration::from_secs(10);

/// The nginx executable: `nginx` on `PATH`, else `/usr/sbin/nginx` (where
/// the Debian package puts it, outside a non-root `PATH`).
pub fn find() -> Option<PathBuf> {
    let on_path =
        std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    on_path.map(|dir| dir.join("nginx")).chain([PathBuf::from("/usr/sbin/nginx")]).find(|p| p.is_file())
}

/// nginx's version line (`nginx version: nginx/1.22.1`), which it prints on stderr.
pub fn version(binary: &Path) -> Option<String> {
    let out = Command::new(binary).arg("-v").output().ok()?;
    let text = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// A running nginx; stopped (master and workers) when dropped.
pub struct Nginx {
    binary: PathBuf,
    dir: tempfile::TempDir,
    child: Child,
    addr: SocketAddr,
}

impl Nginx {
    /// Starts nginx with `workers` worker processes (`auto` or a number),
    /// passing `PREFIX…` to `upstream` over kept-alive connections, and waits
    /// until it accepts connections.
    pub fn start(binary: &Path, upstream: SocketAddr, workers: &str) -> anyhow::Result<Nginx> {
        let mut tries = 1;
        loop {
            match Nginx::try_start(binary, upstream, workers)? {
                Ok(nginx) => return Ok(nginx),
                // Someone took the free port before nginx bound it: another one.
                Err(log) if log.contains("Address already in use") && tries < 3 => tries += 1,
                Err(log) => bail!("nginx exited at start: {log}"),
            }
        }
    }

    /// nginx accepting connections, or its error log if it exited at start.
    fn try_start(
        binary: &Path,
        upstream: SocketAddr,
        workers: &str,
    ) -> anyhow::Result<Result<Nginx, String>> {
        let dir = tempfile::tempdir().context("a temp dir for nginx")?;
        let addr = free_port()?;
        std::fs::write(dir.path().join("nginx.conf"), config(dir.path(), addr, upstream, workers))?;
        let child = Command::new(binary)
            .args(args(dir.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut nginx = Nginx { binary: binary.to_owned(), dir, child, addr };
        let deadline = Instant::now() + PATIENCE;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if nginx.child.try_wait()?.is_some() {
                return Ok(Err(nginx.error_log()));
            }
            if Instant::now() > deadline {
                bail!(
                    "nginx did not accept connections on {addr} within {PATIENCE:?}: {}",
                    nginx.error_log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Ok(nginx))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The master process's id (the workers are its children).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn error_log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
        format!("error.log: {}", log.trim())
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // `-s stop` signals the master, which stops its workers; killing the
        // master outright would leave them running.
        let _ = Command::new(&self.binary)
            .args(args(self.dir.path()))
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + PATIENCE;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn args(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut prefix = dir.as_os_str().to_owned();
    prefix.push("/");
    vec![
        "-p".into(),
        prefix,
        "-c".into(),
        dir.join("nginx.conf").into(),
        "-e".into(),
        dir.join("error.log").into(),
        "-g".into(),
        "daemon off;".into(),
    ]
}

/// A loopback port free a moment ago (nginx binds it right after).
fn free_port() -> anyhow::Result<SocketAddr> {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port for nginx")?;
    Ok(probe.local_addr()?)
}

/// A reverse proxy as one would set it up in front of a keep-alive service:
/// HTTP/1.1 and a pool of idle connections upstream larger than any run's
/// connection count (so no run closes and reopens upstream connections), a
/// socket per worker (`reuseport`, as the gateway's event loops have), no
/// access log (the gateway writes none either), and no limit on requests per
/// connection that would make either side reconnect during a run.
fn config(dir: &Path, listen: SocketAddr, upstream: SocketAddr, workers: &str) -> String {
    let dir = dir.display();
    format!(
        r#"worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 1000000;

    upstream up {{
        server {upstream};
        keepalive 1024;
        keepalive_requests 1000000;
    }}

    server {{
        listen {listen} reuseport;
        location {PREFIX} {{
            proxy_pass http://up/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"#
    )
}
