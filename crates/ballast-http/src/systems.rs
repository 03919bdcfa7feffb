//! The HTTP systems of a service by name, replaceable while it runs — what a
//! reload swaps and what the delivery worker and a gateway look systems up in.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::HttpSystem;

/// The HTTP systems of a service, found by name. Cheap to clone; clones see
/// the same set, and [`replace`](Systems::replace) swaps it for all of them.
/// A call that already looked its system up keeps that system (its client,
/// its policy) until it ends.
///
/// ```
/// use ballast_http::{HttpSystem, Systems};
///
/// let systems = Systems::new([HttpSystem::builder("sms", "http://127.0.0.1:1/").build().unwrap()]);
/// assert!(systems.get("sms").is_some() && systems.get("crm").is_none());
/// systems.replace([HttpSystem::builder("crm", "http://127.0.0.1:1/").build().unwrap()]);
/// assert_eq!(systems.names(), ["crm"]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Systems(Arc<RwLock<Arc<BTreeMap<String, HttpSystem>>>>);

impl Systems {
    /// A set holding `systems`.
    pub fn new(systems: impl IntoIterator<Item = HttpSystem>) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(by_name(systems)))))
    }

    fn current(&self) -> Arc<BTreeMap<String, HttpSystem>> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The system named `name`.
    pub fn get(&self, name: &str) -> Option<HttpSystem> {
        self.current().get(name).cloned()
    }

    /// Every system, ordered by name.
    pub fn all(&self) -> Vec<HttpSystem> {
        self.current().values().cloned().collect()
    }

    /// Every system's name, in order.
    pub fn names(&self) -> Vec<String> {
        self.current().keys().cloned().collect()
    }

    /// The handle of delivery task `task` ([`HttpSystem::handle`]), made
    /// with its system's seal key; `None` for a task that is no delivery,
    /// or whose system or key is gone.
    #[cfg(feature = "queue")]
    pub fn handle_of(&self, task: &ballast_queue::TaskInfo) -> Option<String> {
        if !crate::delivery::is_delivery_kind(&task.kind) {
            return None;
        }
        let delivery: crate::Delivery = serde_json::from_value(task.payload.clone()).ok()?;
        if let Some(handle) = delivery.handle(task.id) {
            return Some(handle);
        }
        let key = ballast::IdempotencyKey::parse(task.key.as_deref()?).ok()?;
        self.get(&delivery.system)?.handle(&key, &delivery, task.id)
    }

    /// Whether `handle` is that of delivery task `task`, compared in
    /// constant time: what `GET /tasks/{handle}` asks before it shows a task.
    #[cfg(feature = "queue")]
    pub fn opens(&self, handle: &str, task: &ballast_queue::TaskInfo) -> bool {
        self.handle_of(task)
            .is_some_and(|own| bool::from(subtle::ConstantTimeEq::ct_eq(own.as_bytes(), handle.as_bytes())))
    }

    /// Replaces the whole set.
    pub fn replace(&self, systems: impl IntoIterator<Item = HttpSystem>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(by_name(systems));
    }
}

fn by_name(systems: impl IntoIterator<Item = HttpSystem>) -> BTreeMap<String, HttpSystem> {
    systems.into_iter().map(|s| (s.name().to_owned(), s)).collect()
}
