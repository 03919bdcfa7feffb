//! A plan bound to its request, owning both: what a call is, decided once
//! ([`crate::plan`]), carried with the request to whatever sends it — a
//! task spawned to outlive its caller included — so nothing that sends it
//! guesses the kind again or asks the request instead of the plan.

use ballast::{Failure, IdempotencyKey, Operation};

use crate::routes::Reached;
use crate::{HttpError, HttpSystem, Plan, Request, Response};

/// A request and its [`Plan`] on one system, owned: made by
/// [`HttpSystem::plan`] (a call its caller declared) or
/// [`HttpSystem::plan_forwarded`] (one it forwards), sent by
/// [`send`](Self::send) (or, with the `queue` feature, [`defer`](Self::defer)).
///
/// ```no_run
/// # async fn run(system: ballast_http::HttpSystem) -> Result<(), Box<dyn std::error::Error>> {
/// use ballast::IdempotencyKey;
/// use ballast_http::Request;
///
/// let key = IdempotencyKey::v5("order-7", "pay");
/// let planned = system.plan_forwarded(Request::post("payments").body("100"), Some(key))?;
/// assert!(planned.plan().is_deduplicated_write() || !system.dedupes_by_key());
/// // The plan travels with the request: spawn it, and the task sends it as planned.
/// let sent = tokio::spawn(planned.send()).await?;
/// # let _ = sent; Ok(()) }
/// ```
#[derive(Debug)]
pub struct Planned {
    system: HttpSystem,
    request: Request,
    operation: Owned,
    route: Option<usize>,
    by_override: bool,
    stream: bool,
}

/// [`Operation`] with its key owned.
#[derive(Debug)]
enum Owned {
    Read,
    KeyedWrite(IdempotencyKey),
    WriteOnce,
}

impl HttpSystem {
    /// What `request`, declared by its caller as `operation`, is on this
    /// system ([`crate::plan`]), bound to the request: send it with
    /// [`Planned::send`]. Refused as the plan is.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use ballast::{IdempotencyKey, Operation};
    /// use ballast_http::{HttpSystem, Request};
    ///
    /// let system = HttpSystem::builder("pay", "http://127.0.0.1:9/").dedupes_by_key(true).build().unwrap();
    /// let key = IdempotencyKey::v5("order-7", "pay");
    /// let planned = system.plan(Operation::KeyedWrite(&key), Request::post("payments")).unwrap();
    /// assert!(planned.plan().is_deduplicated_write());
    /// assert!(system.plan(Operation::Read, Request::post("payments")).is_err(), "a POST is not a read");
    /// # }
    /// ```
    pub fn plan(&self, operation: Operation<'_>, request: Request) -> Result<Planned, HttpError> {
        let key = operation.key().cloned();
        let plan = self.plan_declared(operation, &request)?;
        Ok(Planned::bind(self, &plan, request, key))
    }

    /// What a request nobody declared is on this system — by its route, else
    /// its method and `key` (the table in [`crate::plan`]) — bound to the
    /// request: how a proxy or the gateway plans a call it forwards, before
    /// it decides whether the call may outlive its caller. Read the key
    /// with [`plan::key_in`](crate::plan::key_in). Refused as the plan is.
    pub fn plan_forwarded(
        &self,
        request: Request,
        key: Option<IdempotencyKey>,
    ) -> Result<Planned, HttpError> {
        let plan = self.plan_by_method(&request, key.as_ref())?;
        // The plan borrows the key the planned call will own: a reference
        // count, not a copy.
        Ok(Planned::bind(self, &plan, request, key.clone()))
    }
}

impl Planned {
    /// `request` bound to `plan`, made for it on `system`; `key` is the one
    /// the plan's keyed write carries.
    fn bind(system: &HttpSystem, plan: &Plan<'_>, request: Request, key: Option<IdempotencyKey>) -> Self {
        let operation = match (plan.operation(), key) {
            (Operation::KeyedWrite(_), Some(key)) => Owned::KeyedWrite(key),
            (Operation::Read, _) => Owned::Read,
            _ => Owned::WriteOnce,
        };
        let (route, by_override, stream) = (plan.index(), plan.reached.by_override, plan.stream);
        Planned { system: system.clone(), request, operation, route, by_override, stream }
    }

    /// The plan.
    pub fn plan(&self) -> Plan<'_> {
        view(&self.system, &self.operation, self.route, self.by_override, self.stream)
    }

    /// The request.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The system it is planned on.
    pub fn system(&self) -> &HttpSystem {
        &self.system
    }

    /// The request with an answer's body past `bytes` streamed to the
    /// caller ([`Request::stream_answer_past`]): how an answer is read does
    /// not change what the call is.
    pub fn stream_answer_past(mut self, bytes: usize) -> Self {
        self.request = self.request.stream_answer_past(bytes);
        self
    }

    /// Sends the request as planned, every answer handed back as an answer,
    /// as [`HttpSystem::send`] does.
    pub async fn send(self) -> Result<Response, Failure<HttpError>> {
        let Planned { system, request, operation, route, by_override, stream } = self;
        let plan = view(&system, &operation, route, by_override, stream);
        system.send_planned(plan, request).await
    }

    /// Sends it, handing it to `queue` when the in-memory window cannot
    /// finish it, as [`HttpSystem::write_or_defer_with`] does: only a keyed
    /// write the system deduplicates is ever deferred; any other plan is
    /// sent as it says, and its outcome returned.
    #[cfg(feature = "queue")]
    pub async fn defer(
        self,
        queue: &ballast_queue::Queue,
        options: &crate::delivery::DeferOptions,
    ) -> Result<ballast_queue::Handover<Response>, ballast_queue::HandoverError<HttpError>> {
        let Planned { system, request, operation, route, by_override, stream } = self;
        let plan = view(&system, &operation, route, by_override, stream);
        system.write_or_defer_planned_with(plan, queue, request, options).await
    }
}

/// The [`Plan`] the owned parts describe, borrowing them.
fn view<'a>(
    system: &'a HttpSystem,
    operation: &'a Owned,
    route: Option<usize>,
    by_override: bool,
    stream: bool,
) -> Plan<'a> {
    let operation = match operation {
        Owned::Read => Operation::Read,
        Owned::KeyedWrite(key) => Operation::KeyedWrite(key),
        Owned::WriteOnce => Operation::WriteOnce,
    };
    let found = route.and_then(|index| Some((index, system.routes().iter().nth(index)?)));
    Plan {
        operation,
        reached: Reached { found, by_override },
        dedupes_by_key: system.dedupes_by_key(),
        stream,
    }
}

#[cfg(test)]
mod tests {
    use ballast::{IdempotencyKey, Operation};

    use crate::routes::{RouteKind, Routes};
    use crate::{HttpError, HttpSystem, Refused, Request};

    #[tokio::test]
    async fn the_owned_plan_is_the_plan_its_request_would_get() {
        let routes = Routes::new()
            .route("POST", "/payments", RouteKind::KeyedWrite)
            .and_then(|r| r.route("POST", "/search", RouteKind::Read))
            .unwrap();
        let system = HttpSystem::builder("pay", "http://127.0.0.1:9/")
            .dedupes_by_key(true)
            .routes(routes)
            .build()
            .unwrap();
        let key = IdempotencyKey::v5("order-7", "pay");

        let write = system.plan_forwarded(Request::post("payments"), Some(key.clone())).unwrap();
        assert_eq!(write.plan().operation(), Operation::KeyedWrite(&key));
        assert_eq!(write.plan().route().map(|r| r.name()), Some("POST /payments"));
        assert!(write.plan().is_deduplicated_write());

        // A key does not make a route declared `read` a write.
        let search = system.plan_forwarded(Request::post("search"), Some(key.clone())).unwrap();
        assert_eq!(search.plan().operation(), Operation::Read);
        assert!(!search.plan().is_deduplicated_write());

        let unkeyed = system.plan_forwarded(Request::post("payments"), None).unwrap_err();
        assert!(matches!(unkeyed, HttpError::Refused(Refused::KeyRequired { .. })), "{unkeyed}");
    }
}
