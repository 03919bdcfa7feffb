//! The overview's periodic tasks (`[queue.periodic.*]`): per task its
//! schedule, when its next task is due and the latest period's task that
//! ran — its state and when — read from the queue by the period's key, so
//! every replica's dashboard shows what the fleet ran.

use std::time::{Duration, SystemTime};

use ballast_queue::{PeriodicStatus, TaskInfo, TaskState};
use maud::{html, Markup};

use super::{pages, Ui};

/// How long the overview waits for the periodic tasks' rows: a queue that
/// does not answer shows as such instead of holding the page.
const WAIT: Duration = Duration::from_secs(2);

/// The periodic tasks' table, or nothing when none is configured.
pub(super) async fn section(ui: &Ui) -> Markup {
    let Some(periodic) = ui.0.periodic.get().filter(|p| !p.is_empty()) else { return html! {} };
    let now = SystemTime::now();
    let read = async {
        let mut rows = Vec::with_capacity(periodic.len());
        for task in periodic {
            rows.push(task.status(&ui.0.queue, now).await.map_err(|e| e.to_string()));
        }
        rows
    };
    let rows = tokio::time::timeout(WAIT, read)
        .await
        .unwrap_or_else(|_| vec![Err(format!("no answer within {}", in_words(WAIT)))]);
    html! {
        h2 { "Periodic tasks" }
        table id="periodic" {
            thead { tr {
                th { "name" } th { "schedule" } th { "catch-up" } th { "next run" } th { "last run" }
            } }
            tbody {
                @for row in &rows {
                    @match row {
                        Ok(status) => (line(status, now)),
                        Err(e) => tr { td colspan="5" class="error" { "The queue did not answer: " (e) } },
                    }
                }
            }
        }
    }
}

fn line(status: &PeriodicStatus, now: SystemTime) -> Markup {
    html! {
        tr data-periodic=(status.name) {
            td { (status.name) }
            td { code { (status.schedule) } }
            td { (status.catch_up.as_str()) }
            td class="nowrap" {
                @match status.next_run {
                    Some(at) if at > now => { (pages::when(at)) span class="muted" { " · in " (in_words(at.duration_since(now).unwrap_or_default())) } }
                    Some(at) => { (pages::when(at)) span class="muted" { " · waiting to run" } }
                    None => span class="muted" { "no period left" },
                }
            }
            td class="nowrap" {
                @match &status.last {
                    Some(task) => (last(task)),
                    None => span class="muted" { "none this period or the one before" },
                }
            }
        }
    }
}

/// The latest period's task that ran: its state, linked, and when it
/// ended, or when it runs again.
fn last(task: &TaskInfo) -> Markup {
    html! {
        a href=(format!("/ui/tasks/{}", task.id)) { "#" (task.id) } " "
        span class=(format!("state {}", task.state.as_str())) { (task.state.as_str()) }
        span class="muted" {
            @match (task.state, task.finalized_at) {
                (_, Some(at)) => { " · " (pages::when(at)) }
                (TaskState::Pending, None) => { " · retried at " (pages::when(task.run_at)) }
                _ => {}
            }
            @if task.attempt > 1 { " · attempt " (task.attempt) " of " (task.max_attempts) }
        }
    }
}

fn in_words(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}
