//! The Fleet page (`/ui/fleet`): the replicas of the fleet on this
//! replica's PostgreSQL queue — version, configuration digest, last
//! heartbeat, drift and clock flags — and per system the fleet's attempts
//! sent, calls refused unsent and 429s a second, and the breakers' state,
//! over the last 15 minutes and the last hour, drawn as SVG on the server:
//! every replica's dashboard shows the same, no script or CDN needed, within
//! the dashboard's content security policy. Sent and refused apart: a
//! backlog meeting a rate limit refuses thousands of calls a second while
//! the system receives its limit.

use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::State;
use axum::response::Html;
use ballast_fleet::{Point, Replica, ReplicaState, Series};
use maud::{html, Markup, PreEscaped};

use super::{pages, Ui};

/// One line of a chart: its value at a point.
type Line = fn(&Point) -> f64;

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
                h2 { "Systems, the whole fleet" }
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
                        td { (r.identity.host) @if !r.identity.admin.is_empty() { " " span class="muted" { (r.identity.admin) } } }
                        td class="num" { (r.identity.pid) }
                        td { (r.identity.version) }
                        td class="nowrap" {
                            code { (r.identity.config_digest) }
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
                span class="legend sent" { (format!("{:.1} sent/s", last.sent)) } " "
                span class="legend refused" { (format!("{:.1} refused/s", last.refused)) } " "
                span class="legend throttled" { (format!("{:.1} 429/s", last.throttled)) } " "
                span class="muted" { "now; shaded: a breaker open" } }
            h3 { "last 15 minutes" }
            (PreEscaped(chart(&series.points, Duration::from_secs(15 * 60))))
            h3 { "last hour" }
            (PreEscaped(chart(&series.points, ballast_fleet::samples::WINDOW)))
        }
    }
}

/// Attempts sent a second, calls refused unsent a second and 429s a second
/// (a line each) over the last `window`, on one scale, over a band per step
/// coloured by the worst breaker state of the fleet.
fn chart(points: &[Point], window: Duration) -> String {
    let window = window.as_secs_f64();
    let step = ballast_fleet::samples::STEP.as_secs_f64();
    let points: Vec<&Point> = points.iter().filter(|p| p.ago < window).collect();
    let top = points.iter().map(|p| p.sent.max(p.refused).max(p.throttled)).fold(1.0_f64, f64::max) * 1.1;
    // A point covers its step: from `ago + step` to `ago` before now.
    let x = |ago: f64| (WIDTH * (1.0 - ago / window)).clamp(0.0, WIDTH);
    let y = |v: f64| HEIGHT - HEIGHT * v / top;
    let span = if window >= 3600.0 {
        format!("{:.0} h", window / 3600.0)
    } else {
        format!("{:.0} min", window / 60.0)
    };
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {}\" role=\"img\" aria-label=\"sent, refused and 429s a second, last {span}\">",
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
    let lines: [(&str, Line); 3] =
        [("sent", |p| p.sent), ("refused", |p| p.refused), ("throttled", |p| p.throttled)];
    for (class, value) in lines {
        // A step line: each point level across its step, so one point shows too.
        let line: Vec<String> = points
            .iter()
            .flat_map(|p| [x(p.ago + step), x(p.ago)].map(|at| format!("{at:.1},{:.1}", y(value(p)))))
            .collect();
        let _ = write!(svg, "<polyline class=\"{class}\" points=\"{}\"/>", line.join(" "));
    }
    let _ = write!(
        svg,
        "<text class=\"axis\" x=\"0\" y=\"{}\">{span} ago</text><text class=\"axis\" x=\"{WIDTH}\" y=\"{}\" text-anchor=\"end\">now</text><text class=\"axis\" x=\"2\" y=\"10\">{:.0}/s</text></svg>",
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
        let point = |ago, sent, refused, throttled, breaker| Point {
            ago,
            calls: sent + refused,
            sent,
            refused,
            throttled,
            breaker,
        };
        let points = [
            point(2000.0, 20.0, 0.0, 0.0, 0),
            point(60.0, 20.0, 0.0, 0.0, 0),
            point(30.0, 20.0, 450.0, 5.0, 2),
            point(0.0, 20.0, 0.0, 1.0, 0),
        ];
        let svg = chart(&points, Duration::from_secs(15 * 60));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        for line in ["sent", "refused", "throttled"] {
            assert_eq!(svg.matches(&format!("<polyline class=\"{line}\"")).count(), 1, "{line}: {svg}");
        }
        assert_eq!(svg.matches("band open").count(), 1);
        assert!(!svg.contains("style="), "no inline style: the policy forbids it");
        // A point older than the window is drawn on the hour's chart only.
        let quarter = svg.matches(',').count();
        let hour = chart(&points, ballast_fleet::samples::WINDOW);
        assert!(hour.matches(',').count() > quarter && hour.contains("1 h ago"), "{hour}");
        assert!(svg.contains("15 min ago"), "{svg}");
    }
}
