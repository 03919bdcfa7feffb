//! The Fleet page (`/ui/fleet`): the replicas of the fleet on this
//! replica's PostgreSQL queue — version, configuration digest, last
//! heartbeat, drift and clock flags — and per system the fleet's calls a
//! second, 429s a second and breaker state over the last 15 minutes, drawn
//! as SVG on the server: every replica's dashboard shows the same, no script
//! or CDN needed, within the dashboard's content security policy.

use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::State;
use axum::response::Html;
use ballast_fleet::{Point, Replica, ReplicaState, Series};
use maud::{html, Markup, PreEscaped};

use super::{pages, Ui};

/// The charts' size, in SVG units.
const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 90.0;

pub(super) async fn page(State(ui): State<Ui>) -> Html<String> {
    let body = match ui.0.fleet.get() {
        None => html! {
            h2 { "Fleet" }
            p { "This replica's queue is SQLite: it runs alone. Replicas on one PostgreSQL queue form a fleet that holds its systems' limits and breakers together." }
        },
        Some((view, me)) => {
            let replicas = view.replicas().await;
            let series = view.series().await;
            html! {
                h2 { "Replicas" }
                @match &replicas {
                    Ok(replicas) => (table(replicas, *me)),
                    Err(e) => p class="error" { "The fleet's database did not answer: " (e) },
                }
                h2 { "Systems, the whole fleet, last 15 minutes" }
                @match &series {
                    Ok(series) if series.is_empty() => p class="muted" { "No samples yet." },
                    Ok(series) => { @for s in series { (system(s)) } },
                    Err(e) => p class="error" { "The fleet's database did not answer: " (e) },
                }
            }
        }
    };
    pages::layout(&ui, "Fleet", body)
}

fn table(replicas: &[Replica], me: uuid::Uuid) -> Markup {
    html! {
        table id="replicas" {
            thead { tr {
                th { "replica" } th { "state" } th { "host" } th class="num" { "pid" } th { "version" }
                th { "configuration" } th class="num" { "last heartbeat" } th { "started" } th class="num" { "clock" }
            } }
            tbody {
                @for r in replicas {
                    tr data-state=(r.state.as_str()) {
                        td class="nowrap" {
                            (short(&r.id.simple().to_string()))
                            @if r.id == me { " " span class="tag" { "this one" } }
                        }
                        td { span class=(format!("state {}", if r.state == ReplicaState::Live { "closed" } else { "cancelled" })) { (r.state.as_str()) } }
                        td { (r.host) @if !r.admin.is_empty() { " " span class="muted" { (r.admin) } } }
                        td class="num" { (r.pid) }
                        td { (r.version) }
                        td class="nowrap" {
                            code { (r.config_digest) }
                            @if r.drift { " " span class="tag open" title="this replica loaded another configuration than most live replicas" { "drift" } }
                        }
                        td class="num" { (seconds(r.heartbeat_age)) " ago" }
                        td class="nowrap" { (pages::when(r.started_at)) }
                        td class="num" {
                            (format!("{:+.0} ms", r.clock_skew_ms))
                            @if r.clock_off { " " span class="tag open" title="more than a second off the database's clock" { "off" } }
                        }
                    }
                }
            }
        }
    }
}

fn system(series: &Series) -> Markup {
    let last = series.points.last().copied().unwrap_or_default();
    html! {
        section class="fleet-system" data-system=(series.system) {
            h2 { (series.system) " "
                span class="legend calls" { (format!("{:.1} calls/s", last.calls)) } " "
                span class="legend throttled" { (format!("{:.1} 429/s", last.throttled)) } " "
                span class="muted" { "now; shaded: a breaker open" } }
            (PreEscaped(chart(&series.points)))
        }
    }
}

/// Calls a second (a line) and 429s a second (another), on one scale, over
/// a band per step coloured by the worst breaker state of the fleet.
fn chart(points: &[Point]) -> String {
    let window = ballast_fleet::samples::WINDOW.as_secs_f64();
    let step = ballast_fleet::samples::STEP.as_secs_f64();
    let top = points.iter().map(|p| p.calls.max(p.throttled)).fold(1.0_f64, f64::max) * 1.1;
    // A point covers its step: from `ago + step` to `ago` before now.
    let x = |ago: f64| (WIDTH * (1.0 - ago / window)).clamp(0.0, WIDTH);
    let y = |v: f64| HEIGHT - HEIGHT * v / top;
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {}\" role=\"img\" aria-label=\"calls and 429s a second, last 15 minutes\">",
        HEIGHT + 16.0
    );
    for p in points.iter().filter(|p| p.breaker > 0) {
        let class = match p.breaker {
            1 => "band half_open",
            _ => "band open",
        };
        let _ = write!(
            svg,
            "<rect class=\"{class}\" x=\"{:.1}\" y=\"0\" width=\"{:.1}\" height=\"{HEIGHT}\"/>",
            x(p.ago + step),
            WIDTH * step / window
        );
    }
    for (class, value) in
        [("calls", (|p: &Point| p.calls) as fn(&Point) -> f64), ("throttled", |p: &Point| p.throttled)]
    {
        // A step line: each point level across its step, so one point shows too.
        let line: Vec<String> = points
            .iter()
            .flat_map(|p| [x(p.ago + step), x(p.ago)].map(|at| format!("{at:.1},{:.1}", y(value(p)))))
            .collect();
        let _ = write!(svg, "<polyline class=\"{class}\" points=\"{}\"/>", line.join(" "));
    }
    let _ = write!(
        svg,
        "<text class=\"axis\" x=\"0\" y=\"{}\">15 min ago</text><text class=\"axis\" x=\"{WIDTH}\" y=\"{}\" text-anchor=\"end\">now</text><text class=\"axis\" x=\"2\" y=\"10\">{:.0}/s</text></svg>",
        HEIGHT + 13.0,
        HEIGHT + 13.0,
        top
    );
    svg
}

fn seconds(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64())
}

fn short(id: &str) -> &str {
    &id[id.len().saturating_sub(8)..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_svg_with_a_line_each_and_a_band_where_a_breaker_opened() {
        let points = [
            Point { ago: 60.0, calls: 50.0, throttled: 0.0, breaker: 0 },
            Point { ago: 30.0, calls: 80.0, throttled: 5.0, breaker: 2 },
            Point { ago: 0.0, calls: 90.0, throttled: 1.0, breaker: 0 },
        ];
        let svg = chart(&points);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("band open").count(), 1);
        assert!(!svg.contains("style="), "no inline style: the policy forbids it");
    }
}
