//! A deliberately unreliable payment gateway on 127.0.0.1:0.
//!
//! It is built on hyper directly because its faults must be able to drop a
//! connection without answering: a service that returns `Err` makes hyper
//! close the connection, and the client sees an incomplete message — the
//! "was it applied?" case the guide warns about.
//!
//! Like a real payment provider, it deduplicates `POST /payments` by the
//! `Idempotency-Key` header (a repeat returns the stored answer and charges
//! nothing) and charges every applied request that has no key. It keeps a
//! ledger of what really happened: charges per order, notifications per
//! logical profile update, requests received.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::faults::{Endpoint, Fault, FaultPlan};

/// The body of `POST /payments`.
#[derive(Debug, Deserialize)]
struct Payment {
    run: String,
    order: u32,
}

/// The body of `PATCH /customers/{id}`.
#[derive(Debug, Deserialize)]
struct ProfileUpdate {
    run: String,
    order: u32,
    /// Names the logical update so the ledger can tell a duplicate
    /// notification; the gateway does not deduplicate by it.
    update_id: u64,
}

/// What the gateway saw and did during one run.
#[derive(Debug, Default)]
struct Ledger {
    requests: u64,
    /// Applied charges per order.
    charges: HashMap<u32, u32>,
    /// Notifications sent per (customer, update id).
    notifications: HashMap<(u32, u64), u32>,
    /// The stored answer of every idempotency key seen.
    keys: HashMap<String, Bytes>,
    /// Requests received per (order, endpoint), to number them for the fault plan.
    received: HashMap<(u32, Endpoint), u32>,
    /// Operations whose last answer was a 4xx.
    answered_4xx: HashSet<(u32, Endpoint)>,
    retried_4xx: u64,
}

/// The ledger's totals, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Requests the gateway received, whatever became of them.
    pub requests: u64,
    /// Charges beyond the first, summed over orders.
    pub double_charges: u64,
    /// Notifications beyond the first, summed over logical profile updates.
    pub duplicate_notifications: u64,
    /// 4xx answers followed by another request for the same operation.
    pub retried_4xx: u64,
    /// Orders charged at least once.
    pub orders_charged: u64,
}

impl Ledger {
    fn totals(&self) -> Totals {
        let extra = |n: &u32| u64::from(n.saturating_sub(1));
        Totals {
            requests: self.requests,
            double_charges: self.charges.values().map(extra).sum(),
            duplicate_notifications: self.notifications.values().map(extra).sum(),
            retried_4xx: self.retried_4xx,
            orders_charged: self.charges.values().filter(|&&n| n > 0).count() as u64,
        }
    }
}

/// Why the gateway dropped a connection: one of its planned faults.
#[derive(Debug)]
struct Dropped;

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection dropped on purpose by the fault plan")
    }
}

impl std::error::Error for Dropped {}

type Answer = hyper::Response<Full<Bytes>>;

struct State {
    run: String,
    plan: FaultPlan,
    started: Instant,
    ledger: Mutex<Ledger>,
}

impl State {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        // A panic while holding the lock cannot leave the counters half-updated
        // in a way that matters for a demo, so keep counting.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running gateway; stops accepting connections when dropped.
pub struct FlakyGateway {
    addr: SocketAddr,
    state: Arc<State>,
    stop: CancellationToken,
}

impl FlakyGateway {
    /// Starts a gateway for the run named `run` (requests of other runs are
    /// refused) whose faults follow `plan`; the outage clock starts now.
    pub async fn start(run: &str, plan: FaultPlan) -> std::io::Result<FlakyGateway> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            run: run.to_owned(),
            plan,
            started: Instant::now(),
            ledger: Mutex::new(Ledger::default()),
        });
        let stop = CancellationToken::new();
        tokio::spawn(accept(listener, Arc::clone(&state), stop.clone()));
        Ok(FlakyGateway { addr, state, stop })
    }

    /// The base URL clients call.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The ledger's totals so far.
    pub fn totals(&self) -> Totals {
        self.state.ledger().totals()
    }
}

impl Drop for FlakyGateway {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(listener: TcpListener, state: Arc<State>, stop: CancellationToken) {
    loop {
        let socket = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                // A failed accept (e.g. too many open files) affects one
                // connection, which the client sees as a transport error; the
                // pause keeps a persistent cause from spinning this loop.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let state = Arc::clone(&state);
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(Arc::clone(&state), request));
            let connection = http1::Builder::new().serve_connection(TokioIo::new(socket), service);
            tokio::select! {
                () = stop.cancelled() => {}
                // Errors are the planned dropped connections, or clients that left.
                _ = connection => {}
            }
        });
    }
}

async fn handle(state: Arc<State>, request: hyper::Request<Incoming>) -> Result<Answer, Dropped> {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let key = request.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
        return Err(Dropped);
    };
    let Some(call) = Call::parse(&method, &path, &body) else {
        return Ok(answer(StatusCode::NOT_FOUND, r#"{"error":"no such endpoint"}"#));
    };
    let order = call.order();
    let endpoint = call.endpoint();
    let nth = {
        let mut ledger = state.ledger();
        ledger.requests += 1;
        if ledger.answered_4xx.remove(&(order, endpoint)) {
            ledger.retried_4xx += 1;
        }
        let n = ledger.received.entry((order, endpoint)).or_default();
        *n += 1;
        *n
    };
    if state.plan.in_outage(state.started.elapsed()) {
        return Ok(answer(StatusCode::SERVICE_UNAVAILABLE, r#"{"error":"gateway down"}"#));
    }
    let refused = match &call {
        Call::Pay { run, .. } | Call::Profile { run, .. } if *run != state.run => {
            Some(r#"{"error":"unknown order: it belongs to another run"}"#)
        }
        Call::Pay { .. } if state.plan.declined(order) => Some(r#"{"error":"card declined: invalid CVC"}"#),
        _ => None,
    };
    if let Some(reason) = refused {
        state.ledger().answered_4xx.insert((order, endpoint));
        return Ok(answer(StatusCode::UNPROCESSABLE_ENTITY, reason));
    }
    match state.plan.fault(order, endpoint, nth) {
        Fault::None => Ok(apply(&state, &call, key.as_deref())),
        Fault::ResetBefore => Err(Dropped),
        Fault::AppliedThen500 => {
            apply(&state, &call, key.as_deref());
            Ok(answer(StatusCode::INTERNAL_SERVER_ERROR, r#"{"error":"internal error"}"#))
        }
        Fault::ResetAfter => {
            apply(&state, &call, key.as_deref());
            Err(Dropped)
        }
        Fault::Slow => {
            // Applied in its own task: a client that gave up and closed the
            // connection does not undo a charge already under way.
            let slow = state.plan.slow;
            let late = tokio::spawn(async move {
                tokio::time::sleep(slow).await;
                apply(&state, &call, key.as_deref())
            });
            late.await.map_err(|_| Dropped)
        }
    }
}

/// One parsed request.
enum Call {
    Pay { run: String, order: u32 },
    Read { order: u32 },
    Profile { run: String, order: u32, customer: u32, update_id: u64 },
}

impl Call {
    fn parse(method: &Method, path: &str, body: &[u8]) -> Option<Call> {
        let id = |prefix: &str| path.strip_prefix(prefix).and_then(|id| id.parse::<u32>().ok());
        match *method {
            Method::POST if path == "/payments" => {
                let p: Payment = serde_json::from_slice(body).ok()?;
                Some(Call::Pay { run: p.run, order: p.order })
            }
            Method::GET => Some(Call::Read { order: id("/orders/")? }),
            Method::PATCH => {
                let customer = id("/customers/")?;
                let u: ProfileUpdate = serde_json::from_slice(body).ok()?;
                Some(Call::Profile { run: u.run, order: u.order, customer, update_id: u.update_id })
            }
            _ => None,
        }
    }

    fn order(&self) -> u32 {
        match self {
            Call::Pay { order, .. } | Call::Read { order } | Call::Profile { order, .. } => *order,
        }
    }

    fn endpoint(&self) -> Endpoint {
        match self {
            Call::Pay { .. } => Endpoint::Payment,
            Call::Read { .. } => Endpoint::Order,
            Call::Profile { .. } => Endpoint::Profile,
        }
    }
}

/// Performs the call's side effect and returns the answer it deserves.
fn apply(state: &State, call: &Call, key: Option<&str>) -> Answer {
    let mut ledger = state.ledger();
    match *call {
        Call::Pay { order, .. } => {
            if let Some(stored) = key.and_then(|k| ledger.keys.get(k)) {
                return answer_bytes(StatusCode::CREATED, stored.clone());
            }
            let n = ledger.charges.entry(order).or_default();
            *n += 1;
            let body = Bytes::from(format!(r#"{{"payment":"pay-{order}-{n}","order":{order}}}"#));
            if let Some(k) = key {
                ledger.keys.insert(k.to_owned(), body.clone());
            }
            answer_bytes(StatusCode::CREATED, body)
        }
        Call::Read { order } => {
            let paid = ledger.charges.get(&order).is_some_and(|&n| n > 0);
            answer(StatusCode::OK, &format!(r#"{{"order":{order},"paid":{paid}}}"#))
        }
        Call::Profile { customer, update_id, .. } => {
            *ledger.notifications.entry((customer, update_id)).or_default() += 1;
            answer(StatusCode::OK, &format!(r#"{{"customer":{customer},"notified":true}}"#))
        }
    }
}

fn answer(status: StatusCode, body: &str) -> Answer {
    answer_bytes(status, Bytes::from(body.to_owned()))
}

fn answer_bytes(status: StatusCode, body: Bytes) -> Answer {
    let mut response = hyper::Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
