//! Headless Chromium under chromedriver, driven over WebDriver, for one
//! test at a time: started on a free port with a fresh profile, and ended
//! with the test, a failed one included.
//!
//! Without `chromium` and `chromedriver` on the PATH a test says it was
//! skipped, unless `BALLAST_TEST_BROWSER` is set: then it fails.

use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};

const BROWSER_ENV: &str = "BALLAST_TEST_BROWSER";
/// How long the browser may take to show what a test waits for.
const PATIENCE: Duration = Duration::from_secs(30);

/// Chromium under chromedriver for one test. Dropping it ends both, when a
/// test fails too.
pub struct Browser {
    pub client: Client,
    session: String,
    driver: Driver,
    _profile: tempfile::TempDir,
}

/// A chromedriver process, killed when dropped.
struct Driver {
    process: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Killing chromedriver alone would leave Chromium running: ask it to
        // quit Chromium first, and wait for its answer, sent once it has.
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.driver.port)) {
            let _ = stream.set_read_timeout(Some(PATIENCE));
            let request = format!(
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session
            );
            if stream.write_all(request.as_bytes()).is_ok() {
                let _ = stream.read(&mut [0; 512]);
            }
        }
    }
}

/// Whether pages may run their script.
#[derive(PartialEq)]
pub enum Scripts {
    On,
    Off,
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
}

impl Browser {
    /// A fresh Chromium with a window of 1280×800; or `None`, after saying
    /// the test is skipped, when none is installed and none is required.
    pub async fn start(scripts: Scripts) -> Option<Browser> {
        let required = std::env::var_os(BROWSER_ENV).is_some_and(|v| !v.is_empty());
        let (Some(chromium), Some(chromedriver)) =
            (on_path(&["chromium", "chromium-browser"]), on_path(&["chromedriver"]))
        else {
            assert!(!required, "{BROWSER_ENV} is set but chromium or chromedriver is not on the PATH");
            eprintln!("skipped: chromium or chromedriver not found (set {BROWSER_ENV}=1 to require it)");
            return None;
        };
        let process = Command::new(&chromedriver)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", chromedriver.display()));
        let mut driver = Driver { process, port: 0 };
        driver.port = announced_port(&mut driver.process);

        let profile = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--window-size=1280,800".to_owned(),
            "--force-device-scale-factor=1".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        if scripts == Scripts::Off {
            args.push("--blink-settings=scriptEnabled=false".to_owned());
        }
        let capabilities = serde_json::from_value(serde_json::json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
        }))
        .unwrap();
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .unwrap_or_else(|e| panic!("chromedriver cannot start {}: {e}", chromium.display()));
        let session = client.session_id().await.unwrap().expect("a WebDriver session");
        Some(Browser { client, session, driver, _profile: profile })
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("the browser cannot open {url}: {e}"));
    }

    /// The text of the first element `css` selects, if there is one now.
    pub async fn text(&self, css: &str) -> Option<String> {
        self.client.find(Locator::Css(css)).await.ok()?.text().await.ok()
    }

    pub async fn click(&self, css: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no {css}: {e}"));
        element.click().await.unwrap_or_else(|e| panic!("{css} cannot be clicked: {e}"));
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no {css}: {e}"));
        element.clear().await.unwrap();
        element.send_keys(text).await.unwrap();
    }

    /// The path and query the browser shows.
    pub async fn at(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// Polls until the element `css` exists and its text satisfies `ok`.
    /// Polling also rides out the live refresh replacing an element between
    /// finding it and reading it.
    pub async fn until_text(&self, css: &str, ok: impl Fn(&str) -> bool) {
        self.poll_text(None, css, ok).await;
    }

    /// Opens `url` again and again until the element `css` exists and its
    /// text satisfies `ok`: for what the page shows as of its loading.
    pub async fn reload_until(&self, url: &str, css: &str, ok: impl Fn(&str) -> bool) {
        self.poll_text(Some(url), css, ok).await;
    }

    async fn poll_text(&self, reload: Option<&str>, css: &str, ok: impl Fn(&str) -> bool) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(url) = reload {
                self.goto(url).await;
            }
            let text = self.text(css).await;
            if text.as_deref().is_some_and(&ok) {
                return;
            }
            let at = self.at().await;
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {css} on {at} to show what is expected; it shows {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The port chromedriver says it listens on; its further output is read
/// and dropped, so that it never blocks on a full pipe.
fn announced_port(process: &mut Child) -> u16 {
    let stdout = process.stdout.take().expect("chromedriver's output is piped");
    let (tell, told) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let port = line.strip_prefix("ChromeDriver was started successfully on port ");
            if let Some(port) = port.and_then(|p| p.trim_end_matches('.').parse::<u16>().ok()) {
                let _ = tell.send(port);
            }
        }
    });
    told.recv_timeout(PATIENCE).expect("chromedriver says which port it listens on")
}

/// Polls `check` until it gives a value, for up to [`PATIENCE`].
pub async fn until<T, F: Future<Output = Option<T>>>(what: &str, mut check: impl FnMut() -> F) -> T {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
