//! Telling whoever deferred a write that it ended: a signed `POST` to the
//! URL its request named (`Ballast-Callback`), itself a durable task.
//!
//! When a [`Delivery`] with a [`callback`](Delivery::callback) ends for good
//! — delivered, or failed after its last attempt — its
//! [`DeliveryHandler`](crate::DeliveryHandler) asks the worker to enqueue a
//! [`CALLBACK_KIND`] task in the same transaction that stores the end
//! ([`ballast_queue::Handler::on_end`]): no crash between the two loses
//! the callback. A worker running a [`CallbackHandler`] sends it:
//!
//! ```text
//! POST {callback}
//! Content-Type: application/json
//! Ballast-Signature: t=1764842400,v1=5f2b…   (HMAC-SHA256 of "{t}.{body}", hex)
//! Ballast-Task: 17.3f9c…                    (the write's handle)
//! Ballast-Delivery: 0b4e…                   (the same on every retry of this callback)
//! Idempotency-Key: 0b4e…
//! Via: 1.1 ballast                          (a gateway refuses it: 508 loop_detected)
//!
//! {"type": "task.completed", "delivery": "0b4e…", "to": "https://hooks.shop.example/ballast",
//!  "system": "pay", "task": { …as GET /tasks/{handle} shows it… }}
//! ```
//!
//! A 2xx ends it; a 5xx, a 408, a 429 or no answer is tried again with the
//! queue's backoff; any other 4xx fails it, and the queue alerts. A
//! receiver checks the signature and its time (refusing one older than a
//! few minutes: a replay), that `to` is its own URL (without the query) and
//! `system` one it expects — every caller of the gateway may name a listed
//! receiver, so the signature alone says only that ballast sent it — and
//! drops a `Ballast-Delivery` it has seen. A callback never goes to a port
//! of a listed host that is not listed (a host alone takes 80 and 443), nor
//! to the process's own listeners.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ballast::{Classification, Classify, IdempotencyKey};
use ballast_queue::{Handler, NewTask, Queue, TaskContext, TaskEnd, TaskState};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::Systems;

use super::{Delivery, TaskView};

/// The task kind of a callback: register a [`CallbackHandler`] under it.
pub const CALLBACK_KIND: &str = "ballast.http.callback";

/// The header that carries a callback's signature.
pub const SIGNATURE_HEADER: &str = "ballast-signature";

/// How long a connection to a receiver is kept idle for the next callback.
const CALLBACK_IDLE: Duration = Duration::from_secs(5);

/// How long a callback's receiver has to answer.
const CALLBACK_TIMEOUT: Duration = Duration::from_secs(10);

/// A callback task's payload: which deferred write ended, how, and where to
/// tell it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Callback {
    /// The delivery task's id.
    pub task_id: i64,
    /// Its handle, as the 202 gave it; empty when the handle is made from
    /// the seal key when the callback is sent (it is never stored then).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub handle: String,
    /// Where to `POST`; empty when it is sealed in the delivery's envelope
    /// and read from there when the callback is sent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// `task.completed` or `task.failed`.
    pub event: String,
}

impl Callback {
    /// The callback task for the end of delivery task `end`, if its delivery
    /// asked for one.
    pub(super) fn for_end(end: &TaskEnd<'_>) -> Option<NewTask> {
        // Most deliveries ask for none: not parsed for nothing.
        if !end.payload.contains("\"callback\"") {
            return None;
        }
        let delivery: Delivery = serde_json::from_str(end.payload).ok()?;
        // A sealed callback and a handle made from the seal key are read
        // when the callback is sent: neither is stored in clear here.
        let (url, handle) = match (delivery.callback.clone(), delivery.handle(end.id)) {
            (Some(url), Some(handle)) => (url, handle),
            _ if delivery.sealed_parts.iter().any(|part| part == "callback") => {
                (String::new(), String::new())
            }
            _ => return None,
        };
        let event = match end.state {
            TaskState::Completed => "task.completed",
            _ => "task.failed",
        };
        // One callback per end of one task: a retry of the worker's settle
        // finds it by its key instead of making another.
        let key = IdempotencyKey::v5(format!("{}:{}", end.id, end.key.unwrap_or_default()), event);
        let callback = Callback { task_id: end.id, handle, url, event: event.to_owned() };
        Some(NewTask::new(CALLBACK_KIND, &callback).key(key))
    }
}

/// Where callbacks may go and the secret they are signed with: `[gateway]
/// callback_hosts` and the variable `callback_secret_env` names.
///
/// ```
/// use ballast_http::delivery::CallbackPolicy;
///
/// let policy = CallbackPolicy::new(["hooks.shop.example", "127.0.0.1:8080"], b"0123456789abcdef0123".to_vec());
/// assert!(policy.check("https://hooks.shop.example/ballast").is_ok());
/// assert!(policy.check("http://127.0.0.1:8080/done").is_ok());
/// assert!(policy.check("http://127.0.0.1:9000/done").is_err(), "another port of a host:port entry");
/// assert!(policy.check("http://169.254.169.254/latest").is_err(), "not a named host");
/// ```
#[derive(Clone)]
pub struct CallbackPolicy {
    hosts: Vec<String>,
    secret: Vec<u8>,
    /// The addresses the process serves on ([`serving_on`](Self::serving_on)):
    /// a callback never goes there. Shared by the policy's clones.
    own: std::sync::Arc<std::sync::RwLock<Vec<std::net::SocketAddr>>>,
}

/// What a callback carries so that it cannot be aimed back into a ballast
/// gateway: the gateway refuses a request that has it (508
/// `loop_detected`), as a proxy refuses a request that already went
/// through it (RFC 9110 §7.6.3).
pub const LOOP_MARK: &str = "1.1 ballast";

impl std::fmt::Debug for CallbackPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackPolicy").field("hosts", &self.hosts).finish_non_exhaustive()
    }
}

/// Why a callback URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackRefused {
    /// No callback hosts are configured.
    #[error("callbacks are not configured: list the hosts they may go to in [gateway] callback_hosts")]
    NotConfigured,
    /// Not an absolute `http://` or `https://` URL without credentials.
    #[error("{0}: use an absolute https:// URL without user or password")]
    BadUrl(String),
    /// Its host and port are not in `callback_hosts`.
    #[error(
        "the callback's host {host} is not in [gateway] callback_hosts: a caller may only name hosts the \
         operator listed, never an internal address (a host listed without a port takes 80 and 443 only; \
         list host:port for another)"
    )]
    HostNotAllowed {
        /// The host (and port) it named.
        host: String,
    },
    /// It names one of the addresses this process serves on: the gateway
    /// would call itself with a system's credentials.
    #[error("the callback {host} is this process's own listener: a callback never goes back into ballast")]
    OwnListener {
        /// The host and port it named.
        host: String,
    },
}

impl CallbackPolicy {
    /// Callbacks to `hosts` — `host:port` for that port, or a host name
    /// alone for its scheme's own port (80 for `http`, 443 for `https`) —
    /// signed with `secret`.
    pub fn new<S: AsRef<str>>(hosts: impl IntoIterator<Item = S>, secret: Vec<u8>) -> Self {
        Self {
            hosts: hosts.into_iter().map(|h| h.as_ref().to_ascii_lowercase()).collect(),
            secret,
            own: std::sync::Arc::default(),
        }
    }

    /// The addresses this process serves on (its gateway's and its admin
    /// listener's): no callback goes there, whatever `callback_hosts`
    /// says, its host resolved when it is sent. Every clone of the policy
    /// learns them.
    pub fn serving_on(&self, addrs: impl IntoIterator<Item = std::net::SocketAddr>) {
        *self.own.write().unwrap_or_else(std::sync::PoisonError::into_inner) = addrs.into_iter().collect();
    }

    /// Whether `addr` is one this process serves on.
    fn is_own(&self, addr: std::net::SocketAddr) -> bool {
        let own = self.own.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        own.iter().any(|listener| {
            listener.port() == addr.port()
                && (listener.ip() == addr.ip()
                    || (listener.ip().is_unspecified()
                        && (addr.ip().is_loopback() || addr.ip().is_unspecified())))
        })
    }

    /// `url` (already [`check`](Self::check)ed) with its host resolved:
    /// refused when an address it resolves to is this process's own
    /// listener. What the callback handler asks right before it sends.
    pub async fn check_target(&self, url: &url::Url) -> Result<(), CallbackRefused> {
        let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
        let port = url.port_or_known_default().unwrap_or_default();
        let shown = || format!("{host}:{port}");
        // Unresolvable: the send itself fails and says so.
        let Ok(addrs) = tokio::net::lookup_host((host, port)).await else { return Ok(()) };
        for addr in addrs {
            if self.is_own(addr) {
                return Err(CallbackRefused::OwnListener { host: shown() });
            }
        }
        Ok(())
    }

    /// `url` if a callback may go there.
    pub fn check(&self, url: &str) -> Result<url::Url, CallbackRefused> {
        if self.hosts.is_empty() {
            return Err(CallbackRefused::NotConfigured);
        }
        let parsed = url::Url::parse(url).map_err(|e| CallbackRefused::BadUrl(format!("not a URL ({e})")))?;
        if !matches!(parsed.scheme(), "http" | "https")
            || !parsed.username().is_empty()
            || parsed.password().is_some()
        {
            return Err(CallbackRefused::BadUrl(format!("a {} URL", parsed.scheme())));
        }
        let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
        let port = parsed.port_or_known_default().unwrap_or_default();
        let with_port = format!("{host}:{port}");
        // `port()` is `None` when the URL uses its scheme's own port.
        let own_port = parsed.port().is_none();
        if !self.hosts.iter().any(|h| (*h == host && own_port) || *h == with_port) {
            return Err(CallbackRefused::HostNotAllowed { host: with_port });
        }
        let literal = with_port.trim_start_matches('[').replace("]:", ":").parse::<std::net::SocketAddr>();
        if literal.is_ok_and(|addr| self.is_own(addr))
            || (host == "localhost" && self.is_own((std::net::Ipv4Addr::LOCALHOST, port).into()))
        {
            return Err(CallbackRefused::OwnListener { host: with_port });
        }
        Ok(parsed)
    }

    /// `Ballast-Signature` for `body` sent at `t` (seconds since the Unix
    /// epoch): `t={t},v1={hex HMAC-SHA256(secret, "{t}.{body}")}`.
    pub fn sign(&self, t: u64, body: &[u8]) -> String {
        format!("t={t},v1={}", hex(&signature(&self.secret, t, body)))
    }

    /// Whether `header` is a signature of `body` by this secret, made no
    /// more than `tolerance` before (or after) `now`: what a receiver
    /// checks. Compared in constant time.
    pub fn verify(&self, header: &str, body: &[u8], now: SystemTime, tolerance: Duration) -> bool {
        let mut t = None;
        let mut given = Vec::new();
        for part in header.split(',') {
            match part.trim().split_once('=') {
                Some(("t", value)) => t = value.parse::<u64>().ok(),
                Some(("v1", value)) => given.push(value.to_owned()),
                _ => {}
            }
        }
        let Some(t) = t else { return false };
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        if now.abs_diff(t) > tolerance.as_secs() {
            return false;
        }
        let expected = hex(&signature(&self.secret, t, body));
        given.iter().any(|g| bool::from(subtle::ConstantTimeEq::ct_eq(g.as_bytes(), expected.as_bytes())))
    }
}

fn signature(secret: &[u8], t: u64, body: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a callback was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    /// Its URL is not (or no longer) one callbacks may go to.
    #[error("callback refused: {0}")]
    Refused(#[from] CallbackRefused),
    /// The deferred write it tells of is gone (pruned).
    #[error("the deferred write {0} no longer exists; nothing to tell")]
    Gone(i64),
    /// The queue could not be read.
    #[error("cannot read the deferred write: {0}")]
    Queue(#[from] ballast_queue::Error),
    /// No answer from the receiver.
    #[error("the callback to {url} got no answer: {reason}")]
    Unanswered {
        /// The URL, redacted.
        url: String,
        /// Why.
        reason: String,
    },
    /// The receiver answered with a status other than 2xx.
    #[error("the callback to {url} was answered {status}")]
    Answered {
        /// The URL, redacted.
        url: String,
        /// Its status.
        status: u16,
    },
    /// The callback's URL or handle is sealed with the deferred write and
    /// cannot be read now (its system or the key that sealed it is not
    /// configured): tried again, as a reload or the key may bring it back.
    #[error("the callback of deferred write {task_id} cannot be read: {why}")]
    Sealed {
        /// The delivery task's id.
        task_id: i64,
        /// Why.
        why: String,
    },
}

impl Classify for CallbackError {
    fn classify(&self) -> Classification {
        match self {
            CallbackError::Queue(_) | CallbackError::Unanswered { .. } | CallbackError::Sealed { .. } => {
                Classification::transient()
            }
            CallbackError::Answered { status, .. } if *status >= 500 || matches!(status, 408 | 429) => {
                Classification::transient()
            }
            _ => Classification::permanent(),
        }
    }
}

/// Sends [`Callback`] tasks ([`CALLBACK_KIND`]): reads the deferred write
/// as it ended, and `POST`s it, signed, to the callback's URL.
///
/// ```no_run
/// # fn f(queue: ballast_queue::Queue, systems: ballast_http::Systems) -> Result<(), ballast_queue::WorkerBuildError> {
/// use ballast_http::delivery::{CallbackHandler, CallbackPolicy, CALLBACK_KIND};
///
/// let policy = CallbackPolicy::new(["hooks.shop.example"], std::env::var("CALLBACK_SECRET").unwrap().into_bytes());
/// let worker = ballast_queue::Worker::builder(queue.clone())
///     .handler(CALLBACK_KIND, CallbackHandler::new(queue, systems, policy).expect("TLS roots"))
///     .build()?;
/// # let _ = worker; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct CallbackHandler {
    queue: Queue,
    systems: Systems,
    policy: CallbackPolicy,
    client: reqwest::Client,
}

impl CallbackHandler {
    /// Sends callbacks allowed by `policy`, telling of deferred writes in
    /// `queue` to `systems`. Fails only if the HTTP client cannot be built
    /// (its TLS roots cannot be loaded): never a client without its limits.
    pub fn new(queue: Queue, systems: Systems, policy: CallbackPolicy) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            // A redirect could lead a callback to a host nobody listed.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(CALLBACK_TIMEOUT)
            // Callbacks come in bursts: a connection idle past one is
            // closed, not left holding the receiver's shutdown.
            .pool_idle_timeout(CALLBACK_IDLE)
            .build()?;
        Ok(Self { queue, systems, policy, client })
    }
}

impl CallbackHandler {
    /// Where `callback` goes and the handle it tells of: as stored, or —
    /// for a delivery sealed with a seal key — its URL from its envelope
    /// and its handle made from the key.
    fn resolve(
        &self,
        callback: &Callback,
        ended: &ballast_queue::TaskInfo,
    ) -> Result<(String, String), CallbackError> {
        if !callback.url.is_empty() && !callback.handle.is_empty() {
            return Ok((callback.url.clone(), callback.handle.clone()));
        }
        let sealed = |why: String| CallbackError::Sealed { task_id: callback.task_id, why };
        let delivery: Delivery = serde_json::from_value(ended.payload.clone())
            .map_err(|e| sealed(format!("not a delivery: {e}")))?;
        let system = self
            .systems
            .get(&delivery.system)
            .ok_or_else(|| sealed(format!("its system {} is not configured", delivery.system)))?;
        let key = ended
            .key
            .as_deref()
            .and_then(|k| ballast::IdempotencyKey::parse(k).ok())
            .ok_or_else(|| sealed("it has no idempotency key".into()))?;
        let url = system
            .callback_of(&key, &delivery)
            .map_err(|e| sealed(e.to_string()))?
            .ok_or_else(|| sealed("it asked for no callback".into()))?;
        let handle = system
            .handle(&key, &delivery, ended.id)
            .ok_or_else(|| sealed("the key that sealed it is not configured".into()))?;
        Ok((url, handle))
    }
}

impl Handler for CallbackHandler {
    type Payload = Callback;
    type Error = CallbackError;

    async fn handle(&self, task: TaskContext, callback: Callback) -> Result<(), CallbackError> {
        let ended = self.queue.get(callback.task_id).await?.filter(|t| super::is_delivery_kind(&t.kind));
        let ended = ended.ok_or(CallbackError::Gone(callback.task_id))?;
        let (target, handle) = self.resolve(&callback, &ended)?;
        let url = self.policy.check(&target)?;
        self.policy.check_target(&url).await?;
        let shown = ballast::redact_url(url.as_str());
        let view = TaskView::of(&handle, &ended, &self.systems);
        let delivery_id = task.key().map_or_else(|| task.id().to_string(), |k| k.as_str().to_owned());
        // The delivery id, the receiver and the system are in the signed
        // body: a replayed body cannot pass as another delivery, and an
        // event a caller aimed at another receiver, or of a system the
        // receiver does not expect, is told by what the receiver checks.
        let mut receiver = url.clone();
        receiver.set_query(None);
        receiver.set_fragment(None);
        let system = view.system.clone();
        let event = serde_json::json!({
            "type": callback.event,
            "delivery": delivery_id,
            "to": receiver.as_str(),
            "system": system,
            "task": view,
        });
        let body = serde_json::to_vec(&event).unwrap_or_default();
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        task.lease().check().map_err(|lost| CallbackError::Unanswered {
            url: shown.clone(),
            reason: format!("not sent: {lost}"),
        })?;
        let sent = self
            .client
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, self.policy.sign(t, &body))
            .header("ballast-task", &handle)
            .header(http::header::VIA, LOOP_MARK)
            .header("ballast-delivery", &delivery_id)
            .header("idempotency-key", &delivery_id)
            .body(body)
            .send()
            .await
            // Without its URL: the callback's query may hold the receiver's token.
            .map_err(|e| CallbackError::Unanswered {
                url: shown.clone(),
                reason: e.without_url().to_string(),
            })?;
        let status = sent.status();
        if !status.is_success() {
            return Err(CallbackError::Answered { url: shown, status: status.as_u16() });
        }
        tracing::info!(task_id = callback.task_id, url = %shown, event = %callback.event, "callback delivered");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_body_secret_and_time() {
        let policy = CallbackPolicy::new(["hooks.example"], b"a secret of twenty bytes".to_vec());
        let now = SystemTime::now();
        let t = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
        let body = br#"{"type":"task.completed"}"#;
        let header = policy.sign(t, body);
        let minutes = Duration::from_secs(300);
        assert!(policy.verify(&header, body, now, minutes));
        assert!(!policy.verify(&header, br#"{"type":"task.failed"}"#, now, minutes), "another body");
        let other = CallbackPolicy::new(["hooks.example"], b"another secret entirely".to_vec());
        assert!(!other.verify(&header, body, now, minutes), "another secret");
        let later = now + Duration::from_secs(301);
        assert!(!policy.verify(&header, body, later, minutes), "a replay after the tolerance");
        assert!(!policy.verify("t=x,v1=00", body, now, minutes));
        assert!(!policy.verify("", body, now, minutes));
    }

    #[test]
    fn only_listed_hosts_over_http_are_callbacks() {
        let policy = CallbackPolicy::new(["Hooks.Example", "10.0.0.5:8443"], b"s".to_vec());
        assert!(policy.check("https://hooks.example/x?token=1").is_ok());
        assert!(policy.check("https://HOOKS.example:443/x").is_ok(), "the scheme's own port, spelled out");
        assert!(policy.check("http://hooks.example/x").is_ok());
        for other_port in
            ["https://hooks.example:9999/x", "http://hooks.example:22/x", "http://hooks.example:443/x"]
        {
            assert!(policy.check(other_port).is_err(), "a host entry takes 80 and 443 only: {other_port}");
        }
        assert!(policy.check("https://10.0.0.5:8443/x").is_ok());
        for refused in [
            "https://10.0.0.5/x",
            "https://evil.example/x",
            "https://hooks.example.evil.example/x",
            "ftp://hooks.example/x",
            "https://user:pw@hooks.example/x",
            "/relative",
        ] {
            assert!(policy.check(refused).is_err(), "{refused}");
        }
        assert_eq!(
            CallbackPolicy::new(Vec::<String>::new(), Vec::new()).check("https://a/"),
            Err(CallbackRefused::NotConfigured)
        );
    }

    #[tokio::test]
    async fn a_callback_never_goes_to_the_process_s_own_listeners() {
        let policy =
            CallbackPolicy::new(["127.0.0.1:8080", "localhost:9000", "hooks.example"], b"s".to_vec());
        policy.serving_on(["0.0.0.0:8080".parse().unwrap(), "127.0.0.1:9000".parse().unwrap()]);
        let own = |url: &str| matches!(policy.check(url), Err(CallbackRefused::OwnListener { .. }));
        assert!(own("http://127.0.0.1:8080/call/pay/payments"), "the gateway on every address");
        assert!(own("http://localhost:9000/admin"), "the admin listener by name");
        let resolved = url::Url::parse("http://localhost:9000/admin").unwrap();
        assert!(policy.check_target(&resolved).await.is_err(), "localhost resolved at send time");
        let elsewhere = url::Url::parse("http://127.0.0.1:8081/x").unwrap();
        assert!(policy.check_target(&elsewhere).await.is_ok());
    }
}
