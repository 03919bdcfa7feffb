//! The traces part of `gateway_bench` for a fraction of a second, so it
//! cannot rot: gateways in processes of their own, one without an exporter
//! and one exporting every trace to the bench's OTLP receiver.

use std::time::Duration;

use ballast_bench::gateway_bench::{run, GatewayBenchOptions, Hop, NginxUse, Tracing};

#[test]
fn traced_gateways_are_measured_beside_the_untraced_one() {
    let opts = GatewayBenchOptions {
        connections: vec![2],
        warm_up: Duration::from_millis(50),
        measure: Duration::from_millis(300),
        rounds: 1,
        nginx: NginxUse::Skip,
        nginx_workers: "1".to_owned(),
        ballast_threads: None,
        traces: vec![Tracing::Off, Tracing::parse("1.0").unwrap()],
        serve_exe: Some(env!("CARGO_BIN_EXE_gateway_bench").into()),
        write: false,
        provider: None,
    };
    let report = run(&opts, |line| eprintln!("{line}")).expect("the bench runs");
    let off = report.rows.iter().find(|r| r.hop == Hop::Served(Tracing::Off)).expect("the untraced process");
    assert_eq!(off.spans, Some(0.0), "no exporter, no spans: {off:?}");
    let traced = report.rows.iter().find(|r| r.hop == Hop::Served(Tracing::PerMillion(1_000_000))).unwrap();
    assert!(traced.rate > 0.0 && traced.cpu.is_some(), "{traced:?}");
    let table = report.traces_table();
    assert_eq!(table.lines().count(), 2 + 2, "{table}");
    assert!(table.contains("| sampled 1 | 2 |"), "{table}");
}
