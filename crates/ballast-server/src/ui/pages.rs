//! The dashboard's pages, rendered on the server (maud escapes every value).

use std::time::{Duration, SystemTime};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use ballast::BreakerState;
use ballast_queue::{ListFilter, TaskInfo, TaskState};
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;

use super::Ui;

/// Tasks per page.
const PAGE: u32 = 50;

pub(super) fn layout(ui: &Ui, title: &str, body: Markup) -> Html<String> {
    let navigation = html! {
        nav { a href="/ui/" { "Overview" } a href="/ui/tasks" { "Tasks" } a href="/ui/fleet" { "Fleet" } }
        @if ui.0.token.is_some() {
            form class="inline" method="post" action="/ui/logout" {
                input type="hidden" name="csrf" value=(ui.csrf());
                button type="submit" { "Log out" }
            }
        }
    };
    document(title, navigation, body)
}

/// A whole page: `navigation` goes in the header, beside the name (the
/// login form has none: there is nowhere to go and nothing to log out of).
fn document(title: &str, navigation: Markup, body: Markup) -> Html<String> {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · ballast" }
                link rel="stylesheet" href="/ui/assets/style.css";
                script src="/ui/assets/live.js" defer {}
            }
            body {
                header { h1 { "ballast" } (navigation) }
                main { (body) }
            }
        }
    };
    Html(page.into_string())
}

pub(super) fn when(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn ago(t: SystemTime) -> String {
    let age = SystemTime::now().duration_since(t).unwrap_or_default();
    format!("{} ago", humantime::format_duration(Duration::from_secs(age.as_secs())))
}

/// Where the notice of the last action comes from: `?said=…`.
#[derive(Deserialize, Default)]
pub(super) struct Said {
    said: Option<String>,
}

fn notice(said: &Said) -> Markup {
    html! { @if let Some(s) = &said.said { p class="said" role="status" { (s) } } }
}

pub(super) async fn overview(State(ui): State<Ui>, Query(said): Query<Said>) -> Html<String> {
    let body = html! {
        (notice(&said))
        div id="live" { (live_part(&ui).await) }
    };
    layout(&ui, "Overview", body)
}

/// The part of the overview that the page's script fetches again.
pub(super) async fn live(State(ui): State<Ui>) -> Html<String> {
    Html(live_part(&ui).await.into_string())
}

async fn live_part(ui: &Ui) -> Markup {
    let systems = ui.0.systems.all();
    let snapshot = ui.0.monitor.snapshot();
    let periodic = super::periodic::section(ui).await;
    html! {
        h2 { "External systems" }
        table {
            thead { tr {
                th { "system" } th { "breaker" } th class="num" { "in flight / limit" } th class="num" { "calls/s" }
                th class="num" { "attempts/s" } th class="num" { "rate limit (permits used / rate, per s)" }
                th class="num" { "retry budget (used / allowed)" } th { "client certificate" } th { "last error" }
            } }
            tbody {
                @for system in &systems {
                    @let policy = system.policy();
                    @let rate = ui.0.rates.of(system);
                    @let stats = system.stats();
                    tr data-system=(system.name()) {
                        td class="nowrap" { (system.name()) @if system.is_critical() { " " span class="tag" { "critical" } } }
                        td class="nowrap" { (breaker(system.breaker_state(), policy.breaker().and_then(|b| b.next_probe_in()))) }
                        td class="num" {
                            (policy.bulkhead_in_flight().unwrap_or(0)) " / "
                            (policy.bulkhead_limit().map_or("∞".to_owned(), |l| l.to_string()))
                        }
                        td class="num" { (format!("{:.1}", rate.calls)) }
                        td class="num" { (format!("{:.1}", rate.attempts)) }
                        td class="num" {
                            @match policy.rate_limiter() {
                                Some(limiter) => {
                                    (format!("{:.1} / {:.1}", rate.permits, limiter.rate()))
                                    @if limiter.limit().is_adaptive() { " " span class="tag" { "adaptive" } }
                                    @let held = limiter.snapshot().held_for;
                                    @if !held.is_zero() {
                                        " " span class="tag held" title="the system asked for a pause (Retry-After or a spent quota); capped by max_hold" {
                                            "held " (format!("{}s", held.as_secs().max(1)))
                                        }
                                    }
                                }
                                None => span class="muted" { "off" },
                            }
                        }
                        td class="num" {
                            @match policy.budget_level() {
                                Some(level) => { (level.used) " / " (format!("{:.0}", level.allowed)) }
                                None => span class="muted" { "off" },
                            }
                        }
                        td class="nowrap" { (client_cert(system.client_cert())) }
                        td class="error" {
                            @match &stats.last_error {
                                Some((at, error)) => { span class="muted" { (ago(*at)) ": " } (error) }
                                None => span class="muted" { "none" },
                            }
                        }
                    }
                }
            }
        }
        h2 { "Queue" }
        p {
            @if snapshot.reachable {
                span class="state reachable" { "database reachable" }
            } @else {
                span class="state unreachable" { "database unreachable" }
                @if let Some(e) = &snapshot.error { ": " (e) }
            }
            @if let Some(at) = snapshot.taken_at { span class="muted" { " · counted " (ago(at)) } }
        }
        @if let Some(e) = &snapshot.storage_error {
            p { span class="state unreachable" { "cannot store tasks" } ": " (e) }
        }
        table {
            thead { tr {
                th { "kind" }
                @for state in TaskState::ALL { th class="num" { (state.as_str()) } }
                th class="num" { "lag (oldest due)" } th {}
            } }
            tbody {
                @for kind in &snapshot.stats {
                    tr data-kind=(kind.kind) {
                        td { (kind.kind) }
                        @for state in TaskState::ALL {
                            @let count = kind.count(state);
                            td class="num" {
                                a class=(format!("{}{}", state.as_str(), if count == 0 { " zero" } else { "" })) href=(format!("/ui/tasks?kind={}&state={}", query(&kind.kind), state.as_str())) {
                                    (count)
                                }
                            }
                        }
                        td class="num" { (kind.oldest_due_age.map_or("–".to_owned(), |a| format!("{:.1}s", a.as_secs_f64()))) }
                        td {
                            @if kind.failed > 0 {
                                form class="inline" method="post" action=(format!("/ui/kinds/{}/retry-failed", query(&kind.kind))) {
                                    input type="hidden" name="csrf" value=(ui.csrf());
                                    button type="submit" { "Retry all failed" }
                                }
                            }
                        }
                    }
                }
                @if snapshot.stats.is_empty() { tr { td colspan="8" class="muted" { "no tasks" } } }
            }
        }
        (periodic)
    }
}

/// When the client certificate a system presents expires, flagged within
/// the warning period ([`ballast_tls::EXPIRY_WARNING`]).
fn client_cert(facts: Option<ballast_tls::CertFacts>) -> Markup {
    let Some(facts) = facts else { return html! { span class="muted" { "none" } } };
    let left = facts.remaining(SystemTime::now());
    let day = humantime::format_rfc3339_seconds(facts.not_after).to_string();
    let day = day.split('T').next().unwrap_or_default().to_owned();
    html! {
        span title=(facts.subject) { "until " (day) }
        @if left.is_zero() {
            " " span class="tag expired" { "expired" }
        } @else if left < ballast_tls::EXPIRY_WARNING {
            " " span class="tag expiring" { "in " (left.as_secs() / 86_400) " d" }
        }
    }
}

fn breaker(state: Option<BreakerState>, probe_in: Option<Duration>) -> Markup {
    html! {
        @match state {
            None => span class="muted" { "none" },
            Some(state) => {
                span class=(format!("state {}", state.as_str())) { (state.as_str()) }
                @if let Some(wait) = probe_in {
                    span class="muted" { " · probe in " (humantime::format_duration(Duration::from_secs(wait.as_secs()))) }
                }
            }
        }
    }
}

fn query(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The task list's filters.
#[derive(Deserialize, Default)]
pub(super) struct Filters {
    kind: Option<String>,
    state: Option<String>,
    before: Option<i64>,
}

pub(super) async fn tasks(State(ui): State<Ui>, Query(filters): Query<Filters>) -> Response {
    let kind = filters.kind.filter(|k| !k.is_empty());
    let state = match filters.state.as_deref().filter(|s| !s.is_empty()).map(str::parse::<TaskState>) {
        None => None,
        Some(Ok(state)) => Some(state),
        Some(Err(e)) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let filter = ListFilter { kind: kind.clone(), state, limit: PAGE, ..ListFilter::default() }
        .newest_first(filters.before);
    let page = match ui.0.queue.list(&filter).await {
        Ok(page) => page,
        Err(e) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("the queue did not answer: {e}\n"))
                .into_response()
        }
    };
    let kinds: Vec<String> = ui.0.monitor.snapshot().stats.iter().map(|s| s.kind.clone()).collect();
    let older = (page.len() == PAGE as usize).then(|| page.last().map(|t| t.id)).flatten();
    let body = html! {
        h2 { "Tasks" span class="muted" { " · newest first" } }
        form class="filters" method="get" action="/ui/tasks" {
            label { "kind " select name="kind" {
                option value="" { "any" }
                @for k in &kinds { option value=(k) selected[kind.as_deref() == Some(k.as_str())] { (k) } }
            } }
            label { "state " select name="state" {
                option value="" { "any" }
                @for s in TaskState::ALL { option value=(s.as_str()) selected[state == Some(s)] { (s.as_str()) } }
            } }
            button type="submit" { "Show" }
        }
        table {
            thead { tr {
                th class="num" { "id" } th { "kind" } th { "state" } th class="num" { "attempts" } th { "run at" }
                th { "last error" }
            } }
            tbody {
                @for task in &page {
                    tr {
                        td class="num" { a href=(format!("/ui/tasks/{}", task.id)) { (task.id) } }
                        td { (task.kind) }
                        td {
                            span class=(format!("state {}", task.state.as_str())) { (task.state.as_str()) }
                            @if task.is_held() { " " span class="tag" title="waits behind an earlier write of its sequence" { "held" } }
                        }
                        td class="num" { (task.attempt) " / " (task.max_attempts) }
                        td { @if task.is_held() { span class="muted" { "after its sequence's turn" } } @else { (when(task.run_at)) } }
                        td class="error" { (task.last_error.as_deref().unwrap_or("")) }
                    }
                }
                @if page.is_empty() { tr { td colspan="6" class="muted" { "no tasks" } } }
            }
        }
        @if let Some(before) = older {
            p { a href=(format!("/ui/tasks?kind={}&state={}&before={before}", query(kind.as_deref().unwrap_or("")), state.map_or("", TaskState::as_str))) { "Older →" } }
        }
    };
    layout(&ui, "Tasks", body).into_response()
}

pub(super) async fn task(State(ui): State<Ui>, Path(id): Path<i64>, Query(said): Query<Said>) -> Response {
    let task = match ui.0.queue.get(id).await {
        Ok(Some(task)) => task,
        Ok(None) => {
            return (StatusCode::NOT_FOUND, layout(&ui, "No such task", html! { p { "No task " (id) "." } }))
                .into_response()
        }
        Err(e) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("the queue did not answer: {e}\n"))
                .into_response()
        }
    };
    layout(&ui, &format!("Task {id}"), task_page(&ui, &task, &said)).into_response()
}

fn task_page(ui: &Ui, task: &TaskInfo, said: &Said) -> Markup {
    // A delivery's sealed parts and handle secret are shown by name only.
    let shown = match task.kind.as_str() {
        kind if ballast_http::is_delivery_kind(kind) => ballast_http::Delivery::shown(&task.payload),
        crate::alerts::ALERT_KIND => ballast_http::Delivery::shown(&task.payload),
        _ => task.payload.clone(),
    };
    let payload = serde_json::to_string_pretty(&shown).unwrap_or_default();
    // A held task waits its sequence's turn: it cannot be run before it.
    let retryable = matches!(task.state, TaskState::Failed | TaskState::Pending) && !task.is_held();
    let cancellable = matches!(task.state, TaskState::Pending | TaskState::Running);
    let releasable = task.state == TaskState::Failed && task.sequence.is_some();
    html! {
        (notice(said))
        h2 { "Task " (task.id) " · " (task.kind) " · " span class=(format!("state {}", task.state.as_str())) { (task.state.as_str()) } }
        p {
            @if retryable {
                form class="inline" method="post" action=(format!("/ui/tasks/{}/retry", task.id)) {
                    input type="hidden" name="csrf" value=(ui.csrf());
                    button type="submit" id="retry" {
                        @if task.state == TaskState::Failed { "Retry" } @else { "Run now" }
                    }
                }
                " "
            }
            @if cancellable {
                form class="inline" method="post" action=(format!("/ui/tasks/{}/cancel", task.id)) {
                    input type="hidden" name="csrf" value=(ui.csrf());
                    button type="submit" class="danger" id="cancel" { "Cancel" }
                }
            }
            @if releasable {
                form class="inline" method="post" action=(format!("/ui/tasks/{}/release", task.id)) {
                    input type="hidden" name="csrf" value=(ui.csrf());
                    button type="submit" id="release" title="take this failed write out of its sequence: the writes behind it go on" { "Release its sequence" }
                }
            }
        }
        table class="facts" {
            tbody {
                tr { th { "idempotency key" } td { (task.key.as_deref().unwrap_or("none")) } }
                @if let Some(sequence) = &task.sequence {
                    tr { th { "sequence" } td {
                        (sequence)
                        @if task.is_held() { span class="muted" { " · held behind an earlier write of it" } }
                        @if releasable { span class="muted" { " · holds it until released" } }
                    } }
                }
                tr { th { "attempts" } td { (task.attempt) " of " (task.max_attempts) } }
                tr { th { "run at" } td { @if task.is_held() { "after its sequence's turn" } @else { (when(task.run_at)) } } }
                tr { th { "lease" } td {
                    @match (&task.lease_owner, task.lease_expires_at) {
                        (Some(owner), Some(until)) => { (owner) span class="muted" { " until " (when(until)) } }
                        _ => span class="muted" { "none" },
                    }
                } }
                tr { th { "created" } td { (when(task.created_at)) } }
                tr { th { "finished" } td { (task.finalized_at.map_or("–".to_owned(), when)) } }
                @if let Some(result) = &task.result {
                    tr { th { "result" } td { code { (result) } } }
                }
            }
        }
        h2 { "Payload" }
        pre { (payload) }
        h2 { "Errors" }
        table {
            thead { tr { th class="num" { "attempt" } th { "at" } th { "error" } } }
            tbody {
                @for record in task.errors.iter().rev() {
                    tr {
                        td class="num" { (record.attempt) }
                        td { (when(ballast_queue_time(record.at))) }
                        td class="error" { (record.error) }
                    }
                }
                @if task.errors.is_empty() { tr { td colspan="3" class="muted" { "none" } } }
            }
        }
    }
}

/// A history record's time: microseconds since the Unix epoch.
fn ballast_queue_time(micros: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

pub(super) fn login(problem: Option<&str>) -> Html<String> {
    let body = html! {
        h2 { "Log in" }
        @if let Some(p) = problem { p class="said problem" role="alert" { (p) } }
        form method="post" action="/ui/login" {
            label { "Token " input type="password" name="token" autocomplete="current-password" required; }
            " "
            button type="submit" { "Log in" }
        }
        p class="muted" { "The token is the value of the variable [serve] token_env names." }
    };
    document("Log in", html! {}, body)
}
