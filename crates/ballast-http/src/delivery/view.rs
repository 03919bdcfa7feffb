//! A deferred write as its caller sees it — `GET /tasks/{handle}`, the
//! body of a callback: where it stands, why it was deferred, when it is
//! tried next, and, once delivered, the upstream's answer.

use std::time::{SystemTime, UNIX_EPOCH};

use ballast::IdempotencyKey;
use ballast_queue::{TaskInfo, TaskState};
use serde::Serialize;

use crate::Systems;

use super::{Answer, DeferredBecause, Delivery, DeliveryResult};

/// A deferred write's state, answer included, as a caller sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskView {
    /// The handle it is known by (what the 202's `task_id` said).
    pub task_id: String,
    /// The system it is for.
    pub system: Option<String>,
    /// The write's method (`POST`).
    pub method: Option<String>,
    /// The write's path, relative to the system's base URL: which write
    /// this is, for a handler of callbacks of several.
    pub path: Option<String>,
    /// `pending`, `running`, `completed`, `failed` or `cancelled`.
    pub state: &'static str,
    /// Durable attempts made so far.
    pub attempts: u32,
    /// Durable attempts before it fails and an operator is alerted.
    pub max_attempts: u32,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// When it is (or was) due, seconds since the Unix epoch.
    pub run_at: f64,
    /// When its next attempt is due, seconds since the Unix epoch: while it
    /// is pending (not held behind its sequence) or running (the attempt
    /// under way was due then); `null` once it ended.
    pub next_attempt_at: Option<f64>,
    /// Why it was deferred.
    pub deferred_because: Option<DeferredBecause>,
    /// Once delivered: the upstream's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultView>,
}

/// The upstream's final answer to a deferred write.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultView {
    /// Its status.
    pub status: u16,
    /// Its headers and body; absent for a task delivered before answers
    /// were kept.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
    /// Why the kept answer cannot be shown (it is sealed with a key no
    /// longer configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_error: Option<String>,
}

impl TaskView {
    /// `task`, a [`Delivery`] task known by `handle`; its answer opened
    /// with the seal key of its system among `systems` when it is sealed.
    pub fn of(handle: &str, task: &TaskInfo, systems: &Systems) -> TaskView {
        let delivery = serde_json::from_value::<Delivery>(task.payload.clone()).ok();
        let seconds = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let result = task.result.clone().map(|value| result_view(value, task, delivery.as_ref(), systems));
        TaskView {
            task_id: handle.to_owned(),
            system: delivery.as_ref().map(|d| d.system.clone()),
            method: delivery.as_ref().map(|d| d.method.clone()),
            path: delivery.as_ref().map(|d| d.path.clone()),
            state: task.state.as_str(),
            attempts: task.attempt,
            max_attempts: task.max_attempts,
            last_error: task.last_error.clone(),
            run_at: seconds(task.run_at),
            next_attempt_at: (matches!(task.state, TaskState::Pending | TaskState::Running)
                && !task.is_held())
            .then(|| seconds(task.run_at)),
            deferred_because: delivery.and_then(|d| d.deferred_because),
            result,
        }
    }
}

fn result_view(
    value: serde_json::Value,
    task: &TaskInfo,
    delivery: Option<&Delivery>,
    systems: &Systems,
) -> ResultView {
    let Ok(result) = serde_json::from_value::<DeliveryResult>(value) else {
        return ResultView {
            status: 0,
            answer: None,
            answer_error: Some("the stored result is not a delivery's".into()),
        };
    };
    if result.sealed.is_none() {
        return ResultView { status: result.status, answer: result.answer, answer_error: None };
    }
    let opened = (|| {
        let delivery = delivery.ok_or("the task is not a delivery")?;
        let system = systems.get(&delivery.system).ok_or("its system is no longer configured")?;
        let key =
            task.key.as_deref().and_then(|k| IdempotencyKey::parse(k).ok()).ok_or("the task has no key")?;
        system.open_answer(&key, delivery, &result).map_err(|e| e.to_string())
    })();
    match opened {
        Ok(answer) => ResultView { status: result.status, answer, answer_error: None },
        Err(e) => ResultView {
            status: result.status,
            answer: None,
            answer_error: Some(format!("the answer is sealed and does not open: {e}")),
        },
    }
}
