//! The report of a gateway bench run: its rows, the target ratios at each
//! connection count, and the tables BENCHMARKS.md takes.

use std::fmt::Write as _;
use std::time::Duration;

use super::{
    GatewayBenchReport, Hop, Ratios, Row, Tracing, CPU_TARGET, FLOOR_TARGET, LATENCY_TARGET,
    THROUGHPUT_TARGET,
};

pub(super) fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// `12345.6` as `12,346`.
pub(super) fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl GatewayBenchReport {
    fn row(&self, hop: Hop, connections: usize) -> Option<&Row> {
        self.rows.iter().find(|r| r.hop == hop && r.connections == connections)
    }

    /// The target ratios at each connection count, when nginx was measured.
    pub fn ratios(&self) -> Vec<Ratios> {
        let mut counts: Vec<usize> = self.rows.iter().map(|r| r.connections).collect();
        counts.dedup();
        counts
            .into_iter()
            .filter_map(|connections| {
                let direct = self.row(Hop::Direct, connections)?;
                let nginx = self.row(Hop::Nginx, connections)?;
                let ballast = self.row(Hop::Ballast, connections)?;
                let added = |r: &Row| r.p50.as_secs_f64() - direct.p50.as_secs_f64();
                let floor = self.row(Hop::HyperProxy, connections);
                let cpu = |a: &Row, b: &Row| match (a.cpu, b.cpu) {
                    (Some(a), Some(b)) if !b.is_zero() => Some(a.as_secs_f64() / b.as_secs_f64()),
                    _ => None,
                };
                Some(Ratios {
                    connections,
                    added_p50: (added(nginx) > 0.0).then(|| added(ballast) / added(nginx)),
                    throughput: ballast.rate / nginx.rate,
                    cpu: cpu(ballast, nginx),
                    floor_cpu: floor.and_then(|f| cpu(ballast, f)),
                    floor_instructions: floor
                        .and_then(|f| Some(ballast.instructions? / f.instructions.filter(|i| *i > 0.0)?)),
                    floor_over_nginx: floor.and_then(|f| cpu(f, nginx)),
                })
            })
            .collect()
    }

    /// The measurements as a markdown table.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| hop | connections | requests/s | p50 | p99 | p50 added to direct | proxy CPU/request | instructions/request |\n|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            let added = match self.row(Hop::Direct, row.connections) {
                Some(direct) if row.hop != Hop::Direct => {
                    format!("{:+.1} µs", (row.p50.as_secs_f64() - direct.p50.as_secs_f64()) * 1e6)
                }
                _ => "–".to_owned(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {added} | {} | {} |",
                row.hop.label(),
                row.connections,
                thousands(row.rate),
                micros(row.p50),
                micros(row.p99),
                row.cpu.map_or("–".to_owned(), micros),
                row.instructions.map_or("–".to_owned(), thousands),
            );
        }
        out
    }

    /// What reaching a provider over TLS with OAuth 2.0 tokens adds to a
    /// call, as a markdown table beside the plain gateway; empty when the
    /// provider was not measured.
    pub fn provider_table(&self) -> String {
        let Some((tokens, calls)) = self.provider_tokens else { return String::new() };
        let mut out = String::from(
            "| connections | plain CPU/request | TLS + OAuth 2.0 CPU/request | added CPU/request | requests/s plain → provider |\n|---|---|---|---|---|\n",
        );
        for row in self.rows.iter().filter(|r| r.hop == Hop::Provider) {
            let Some(plain) = self.row(Hop::Ballast, row.connections) else { continue };
            let added = match (row.cpu, plain.cpu) {
                (Some(with), Some(without)) => {
                    format!("{:+.1} µs", (with.as_secs_f64() - without.as_secs_f64()) * 1e6)
                }
                _ => "–".to_owned(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {added} | {} → {} |",
                row.connections,
                plain.cpu.map_or("–".to_owned(), micros),
                row.cpu.map_or("–".to_owned(), micros),
                thousands(plain.rate),
                thousands(row.rate),
            );
        }
        let per_thousand = tokens as f64 * 1000.0 / calls.max(1) as f64;
        let _ =
            writeln!(out, "\n{tokens} token requests for {calls} calls: {per_thousand:.3} per 1,000 calls");
        out
    }

    /// The cost of traces, as a markdown table: each traced gateway beside
    /// the one without an exporter, at each connection count; empty when
    /// no traced gateway was measured.
    pub fn traces_table(&self) -> String {
        let served: Vec<&Row> = self.rows.iter().filter(|r| matches!(r.hop, Hop::Served(_))).collect();
        if served.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "| traces | connections | requests/s | p50 | p99 | CPU/request | CPU ÷ off | spans exported/request |\n|---|---|---|---|---|---|---|---|\n",
        );
        for row in served {
            let Hop::Served(tracing) = row.hop else { continue };
            let off = self.row(Hop::Served(Tracing::Off), row.connections).and_then(|r| r.cpu);
            let ratio = match (row.cpu, off) {
                (Some(cpu), Some(off)) if !off.is_zero() => {
                    format!("{:.2}×", cpu.as_secs_f64() / off.as_secs_f64())
                }
                _ => "–".to_owned(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {ratio} | {} |",
                tracing.label(),
                row.connections,
                thousands(row.rate),
                micros(row.p50),
                micros(row.p99),
                row.cpu.map_or("–".to_owned(), micros),
                row.spans.map_or("–".to_owned(), |s| format!("{s:.2}")),
            );
        }
        out
    }

    /// The target ratios as a markdown table, or why there are none.
    pub fn ratio_table(&self) -> String {
        let ratios = self.ratios();
        if ratios.is_empty() {
            let why = self.nginx.as_ref().err().map_or("not measured", String::as_str);
            return format!(
                "No ratios: nginx {why}; only direct, the hyper proxy and ballast were measured.\n"
            );
        }
        let verdict = |met: bool| if met { "met" } else { "missed" };
        let mut out = format!(
            "| connections | ballast CPU/request ÷ nginx's (target ≤ {CPU_TARGET}×) | ballast added p50 ÷ nginx added p50 (target ≤ {LATENCY_TARGET}× at 1) | ballast requests/s ÷ nginx (target ≥ {THROUGHPUT_TARGET}×) | ballast CPU/request ÷ hyper proxy's (target ≤ {FLOOR_TARGET}×) | ballast instructions/request ÷ hyper proxy's (target ≤ {FLOOR_TARGET}×) | hyper proxy CPU/request ÷ nginx's |\n|---|---|---|---|---|---|---|\n"
        );
        for r in ratios {
            let cpu =
                r.cpu.map_or_else(|| "–".to_owned(), |x| format!("{x:.2}×: {}", verdict(x <= CPU_TARGET)));
            let latency = match r.added_p50 {
                None => "– (nginx added nothing measurable)".to_owned(),
                Some(x) if r.connections == 1 => format!("{x:.2}×: {}", verdict(x <= LATENCY_TARGET)),
                Some(x) => format!("{x:.2}× (no target)"),
            };
            let throughput = format!("{:.2}×: {}", r.throughput, verdict(r.throughput >= THROUGHPUT_TARGET));
            let floor = |x: Option<f64>| {
                x.map_or_else(|| "–".to_owned(), |x| format!("{x:.2}×: {}", verdict(x <= FLOOR_TARGET)))
            };
            let over = r.floor_over_nginx.map_or_else(|| "–".to_owned(), |x| format!("{x:.2}×"));
            let _ = writeln!(
                out,
                "| {} | {cpu} | {latency} | {throughput} | {} | {} | {over} |",
                r.connections,
                floor(r.floor_cpu),
                floor(r.floor_instructions)
            );
        }
        out
    }
}
