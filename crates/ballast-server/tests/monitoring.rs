//! The shipped monitoring (`examples/monitoring`) against the code: every
//! metric its alerting rules and dashboard query is one that ballast records
//! and `ballast serve` serves on `/metrics`, and promtool accepts the rules,
//! passes their unit tests and parses every dashboard query.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ballast::IdempotencyKey;
use ballast_test_support::{Reply, Upstream};
use serde_json::Value;
use support::{client, serve};

const PROMTOOL_ENV: &str = "BALLAST_TEST_PROMTOOL";
const RULES: &str = "ballast-rules.yml";
const RULE_TESTS: &str = "ballast-rules.test.yml";
const DASHBOARD: &str = "ballast-dashboard.json";
/// The series a Prometheus histogram is served as, besides its name.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

fn monitoring_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/monitoring")
}

fn read(name: &str) -> String {
    let path = monitoring_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The names every ballast crate says it records.
fn registered() -> BTreeSet<&'static str> {
    ballast_http::metrics::NAMES.into_iter().chain(ballast_queue::metrics::NAMES).collect()
}

/// Every `ballast_…` identifier in `text`: metric names, in PromQL, series
/// notation or prose alike.
fn metric_names(text: &str) -> BTreeSet<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    for (start, _) in text.match_indices("ballast_") {
        if text[..start].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &text[start..];
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        names.insert(rest[..end].to_owned());
    }
    names
}

/// Whether `name` is a recorded metric, or one of a recorded histogram's series.
fn is_recorded(name: &str, registered: &BTreeSet<&str>) -> bool {
    registered.contains(name)
        || HISTOGRAM_SUFFIXES.iter().filter_map(|s| name.strip_suffix(s)).any(|n| registered.contains(n))
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"))
}

/// The dashboard's panels, those inside rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("a panels array") {
        out.push(panel);
        out.extend(panel["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Every PromQL query of the dashboard's panels, its Grafana variables
/// replaced by what an "All" selection and a 5 m rate interval make of them.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("a templating list")
        .iter()
        .filter(|v| v["type"] == "query")
        .filter_map(|v| v["name"].as_str())
        .collect();
    let mut queries = Vec::new();
    for panel in panels(dashboard).into_iter().filter(|p| p["type"] != "row") {
        let title = &panel["title"];
        let targets = panel["targets"].as_array().filter(|t| !t.is_empty());
        for target in targets.unwrap_or_else(|| panic!("panel {title} has no query")) {
            let expr = target["expr"].as_str().filter(|e| !e.trim().is_empty());
            let mut expr =
                expr.unwrap_or_else(|| panic!("panel {title} has a target without expr")).to_owned();
            expr = expr.replace("$__rate_interval", "5m");
            for name in &variables {
                expr = expr.replace(&format!("${{{name}}}"), ".*").replace(&format!("${name}"), ".*");
            }
            assert!(!expr.contains('$'), "panel {title}: unknown variable in {expr}");
            queries.push(expr);
        }
    }
    queries
}

#[test]
fn every_metric_the_rules_and_the_dashboard_name_is_one_ballast_records() {
    let registered = registered();
    for file in [RULES, RULE_TESTS, DASHBOARD] {
        let names = metric_names(&read(file));
        assert!(!names.is_empty(), "{file} names no ballast metric");
        let unknown: Vec<_> = names.iter().filter(|n| !is_recorded(n, &registered)).collect();
        assert!(unknown.is_empty(), "{file} names metrics no ballast crate records: {unknown:?}");
    }

    let dashboard = dashboard();
    for query in dashboard_queries(&dashboard) {
        assert!(!metric_names(&query).is_empty(), "a dashboard query reads no ballast metric: {query}");
    }
}

#[test]
fn the_dashboard_is_importable_with_its_variables() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "schemaVersion");
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()), "uid");
    let variables = dashboard["templating"]["list"].as_array().expect("templating");
    let variable = |name: &str| {
        variables.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no variable {name}"))
    };
    let datasource = variable("datasource");
    assert_eq!((&datasource["type"], &datasource["query"]), (&"datasource".into(), &"prometheus".into()));
    for name in ["system", "kind"] {
        let query = variable(name)["query"].as_str().unwrap_or_default();
        assert!(
            query.starts_with("label_values(ballast_") && query.ends_with(&format!(", {name})")),
            "variable {name}: {query}"
        );
    }

    let mut ids = BTreeSet::new();
    let prometheus = serde_json::json!({ "type": "prometheus", "uid": "${datasource}" });
    for panel in panels(&dashboard) {
        assert!(ids.insert(panel["id"].as_u64().expect("panel id")), "panel id {} twice", panel["id"]);
        assert!(panel["gridPos"]["w"].as_u64().is_some_and(|w| w <= 24), "{}", panel["title"]);
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"], prometheus, "panel {}", panel["title"]);
            for target in panel["targets"].as_array().into_iter().flatten() {
                assert_eq!(target["datasource"], prometheus, "panel {}", panel["title"]);
            }
        }
    }
}

#[test]
fn every_alert_has_a_unit_test() {
    let tests = read(RULE_TESTS);
    let rules = read(RULES);
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    assert!(alerts.len() >= 5, "{alerts:?}");
    for alert in alerts {
        assert!(tests.contains(&format!("alertname: {alert}\n")), "no test of {alert} in {RULE_TESTS}");
    }
}

/// The names of the series in a Prometheus text exposition.
fn series_names(text: &str) -> BTreeSet<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect()
}

/// The rest of a configuration whose `[serve]` table `support::serve` opens.
const SERVED: &str = include_str!("configs/monitoring.toml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recorded_name_and_every_series_the_monitoring_reads_is_served() {
    let upstream = Upstream::start(|_, _| Reply::body(503, "down")).await;
    let server = serve(&upstream, SERVED).await;

    // A write the system refuses, deferred to the queue: the queue gauges
    // get a kind. Then a read that succeeds.
    let deferred = server.defer("pay/payments", IdempotencyKey::v5("order-1", "pay").as_str(), "").await;
    assert_eq!(deferred.status().as_u16(), 202);
    upstream.rescript(|_, _| Reply::body(200, "ok"));
    let order = server.read("pay/orders/1").await;
    assert_eq!(order.status().as_u16(), 200);

    let registered = registered();
    let mut wanted: BTreeSet<String> = registered.iter().map(|n| n.to_string()).collect();
    for file in [RULES, DASHBOARD] {
        wanted.extend(metric_names(&read(file)));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text =
            client().get(format!("{}/metrics", server.admin)).send().await.unwrap().text().await.unwrap();
        let served = series_names(&text);
        let is_served = |name: &String| {
            served.contains(name.as_str())
                || registered.contains(name.as_str())
                    && HISTOGRAM_SUFFIXES.iter().any(|s| served.contains(format!("{name}{s}").as_str()))
        };
        let missing: Vec<&String> = wanted.iter().filter(|n| !is_served(n)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not served on /metrics: {missing:?}\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether to run promtool: when it is on the PATH, or when
/// `BALLAST_TEST_PROMTOOL` is set, and then its absence fails the test.
fn promtool() -> bool {
    let required = std::env::var_os(PROMTOOL_ENV).is_some();
    match Command::new("promtool").arg("--version").output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => panic!("`promtool --version` failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            eprintln!("skipped: promtool not found (set {PROMTOOL_ENV}=1 to require it)");
            false
        }
        Err(e) => panic!("{PROMTOOL_ENV} is set but promtool cannot run: {e}"),
    }
}

fn run_promtool(args: &[&str], dir: &Path) {
    let out = Command::new("promtool").args(args).current_dir(dir).output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_accepts_the_rules_and_passes_their_unit_tests() {
    if !promtool() {
        return;
    }
    run_promtool(&["check", "rules", RULES], &monitoring_dir());
    run_promtool(&["test", "rules", RULE_TESTS], &monitoring_dir());
}

#[test]
fn promtool_parses_every_dashboard_query() {
    if !promtool() {
        return;
    }
    // promtool parses PromQL in rule files only: one recording rule a query.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, query) in dashboard_queries(&dashboard()).iter().enumerate() {
        let quoted = serde_json::to_string(query).unwrap();
        rules.push_str(&format!("      - record: dashboard:query_{i}\n        expr: {quoted}\n"));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.yml"), rules).unwrap();
    run_promtool(&["check", "rules", "dashboard.yml"], dir.path());
}
