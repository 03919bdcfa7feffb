//! Following an operation a system accepted with `202 Accepted` and a
//! status URL (`Location`) to its end, durably: the delivery task records
//! where the status is ([`Following`]) and the worker reads it, as a read
//! under the system's policy, until a final answer — a status other than
//! 202, or the route's [`Follow`] field reaching a final value — or the
//! route's deadline. Between looks it waits what `Retry-After` says, or a
//! jittered exponential backoff (R-RES-RE-X3).

use std::time::{Duration, SystemTime};

use ballast::Operation;
use ballast_queue::TaskContext;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::routes::Follow;
use crate::{HttpSystem, Request, Response};

use super::wire::unix_millis;
use super::{Delivery, DeliveryError};

/// The first wait between looks without a `Retry-After`.
const FIRST_LOOK: Duration = Duration::from_secs(1);

/// The longest wait between looks.
const LONGEST_LOOK: Duration = Duration::from_secs(60);

/// Where an accepted operation's status is read, stored with its delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Following {
    /// The status URL's path, relative to the system's base URL.
    pub path: String,
    /// Its query, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// When the operation was accepted, ms since the Unix epoch.
    pub accepted_at: u64,
    /// Until when it is followed, ms since the Unix epoch.
    pub until: u64,
    /// The JSON field that says it ended, if any ([`Follow::field`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// That field's final values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<String>,
    /// Looks made so far.
    #[serde(default)]
    pub looks: u32,
}

impl Following {
    /// The operation `answer` (a 202 to a write of `request` through a route
    /// that `follow`s) started, if its `Location` is a status URL under the
    /// system's base URL — never another host: the worker reads it with the
    /// system's credentials.
    pub(crate) fn accepted(
        system: &HttpSystem,
        follow: &Follow,
        request_path: &str,
        answer: &Response,
    ) -> Option<Following> {
        if answer.status() != http::StatusCode::ACCEPTED {
            return None;
        }
        let location = answer.headers().get(http::header::LOCATION)?.to_str().ok()?;
        let Some((path, query)) = system.under_base(request_path, location) else {
            tracing::warn!(
                system = system.name(),
                "a 202's Location is not under the system's base URL: not followed; the 202 is the answer"
            );
            return None;
        };
        let now = SystemTime::now();
        let until = now.checked_add(follow.deadline_after()).unwrap_or(now);
        Some(Following {
            path,
            query,
            accepted_at: unix_millis(now),
            until: unix_millis(until),
            field: follow.field_name().map(str::to_owned),
            done: follow.done_values().map(str::to_owned).collect(),
            looks: 0,
        })
    }

    /// How long after `answer` (the 202) the status is first read.
    pub(crate) fn first_look(&self, answer: &Response) -> Duration {
        self.next_look(Some(answer))
    }

    /// Whether `answer` is the operation's final one.
    fn is_final(&self, answer: &Response) -> bool {
        if answer.status() == http::StatusCode::ACCEPTED {
            return false;
        }
        let Some(field) = &self.field else { return true };
        if !answer.status().is_success() {
            return true;
        }
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(answer.body()) else { return false };
        let value = field.split('.').try_fold(&json, |v, part| v.get(part));
        let text = match value {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Null) | None => return false,
            Some(other) => other.to_string(),
        };
        self.done.contains(&text)
    }

    /// How long to wait before the next look: what `Retry-After` says, or
    /// 1 s doubling per look up to 60 s, jittered; never past the deadline.
    fn next_look(&self, answer: Option<&Response>) -> Duration {
        let said = answer.and_then(|a| crate::classify::retry_after(a.headers()));
        let wait = said.unwrap_or_else(|| {
            let exp = FIRST_LOOK.saturating_mul(1 << self.looks.min(6)).min(LONGEST_LOOK);
            exp.mul_f64(rand::rng().random_range(0.5..=1.0))
        });
        let left = Duration::from_millis(self.until.saturating_sub(unix_millis(SystemTime::now())));
        wait.min(left).max(Duration::from_millis(100))
    }
}

impl HttpSystem {
    /// Records that `delivery` (task `task`) now follows `following`: the
    /// next attempt reads its status, after the wait `answer` asks for.
    pub(super) fn start_following(
        &self,
        task: &TaskContext,
        delivery: &Delivery,
        following: Following,
        answer: &Response,
    ) -> DeliveryError {
        let retry_in = following.next_look(Some(answer));
        let next = Delivery { following: Some(following), ..delivery.clone() };
        // A delivery always serializes: it was read from JSON.
        let _ = task.set_next_payload(&next);
        task.not_attempted();
        tracing::info!(
            system = self.name(),
            task_id = task.id(),
            ?retry_in,
            "operation accepted; following it"
        );
        DeliveryError::Running { system: self.name().to_owned(), retry_in }
    }

    /// One look at the status of the operation `delivery` follows.
    pub(super) async fn look(
        &self,
        task: &TaskContext,
        delivery: &Delivery,
        following: &Following,
    ) -> Result<Response, DeliveryError> {
        if unix_millis(SystemTime::now()) > following.until {
            return Err(DeliveryError::FollowDeadline {
                system: self.name().to_owned(),
                deadline: Duration::from_millis(following.until.saturating_sub(following.accepted_at)),
                status_path: following.path.clone(),
            });
        }
        let mut request = Request::get(following.path.as_str()).gate(super::handler::lease_gate(task));
        if let Some(query) = &following.query {
            request = request.raw_query(query);
        }
        let sent = ballast::background(self.send(Operation::Read, request)).await;
        let answer = match sent {
            Ok(answer) if answer.verdict().is_none() => answer,
            Ok(answer) => {
                return Err(DeliveryError::Answered {
                    system: self.name().to_owned(),
                    dedupes_by_key: true,
                    status: answer.status(),
                    verdict: answer.verdict().unwrap_or_else(ballast::Classification::permanent),
                    attempts: answer.attempts(),
                })
            }
            Err(failure) => {
                if failure.attempts() == 0 {
                    task.not_attempted();
                }
                // A read: trying it again is always safe.
                return Err(DeliveryError::Failed {
                    system: self.name().to_owned(),
                    dedupes_by_key: true,
                    failure,
                });
            }
        };
        if following.is_final(&answer) {
            return Ok(answer);
        }
        let mut next = following.clone();
        next.looks += 1;
        let retry_in = next.next_look(Some(&answer));
        let _ = task.set_next_payload(&Delivery { following: Some(next), ..delivery.clone() });
        task.not_attempted();
        Err(DeliveryError::Running { system: self.name().to_owned(), retry_in })
    }
}
