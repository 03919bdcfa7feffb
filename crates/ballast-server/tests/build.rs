//! Checked configurations turned into running parts by the composition root
//! (`ballast_server::build`): the HTTP systems a file describes build as lint
//! promised, with the settings lint read.

use std::time::Duration;

use ballast_config::Config;
use ballast_server::build::{http_system, http_systems};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/ballast.toml");

#[tokio::test]
async fn retry_on_is_read_as_lint_reads_it() {
    let config = Config::parse(
        "t.toml",
        "[systems.a]\nbase_url = \"http://127.0.0.1:1\"\n[systems.a.retry]\nmax_attempts = 2\nretry_on = [\"5XX\", \" 429 \"]\n",
    )
    .unwrap();
    assert!(config.lint().iter().all(|f| !f.is_error()), "{:?}", config.lint());
    let system = http_system(&config, "a").expect("builds");
    assert_eq!(system.retry_on(), ballast_http::RetryOn::from_names(&["5xx", "429"]).unwrap());
}

#[tokio::test]
async fn the_shipped_example_builds_its_http_systems() {
    let config = Config::load(EXAMPLE).expect("example loads");
    let systems = http_systems(&config).expect("every HTTP system builds");
    let names: Vec<_> = systems.iter().map(|s| s.name().to_owned()).collect();
    assert_eq!(names, ["crm", "sber", "sms"]);
    let sber = &systems[1];
    assert!(sber.is_critical());
    assert!(sber.dedupes_by_key());
    assert_eq!(sber.policy().retry().max_attempts(), 3);
}

#[test]
fn a_system_without_base_url_is_not_an_http_system() {
    let config = Config::parse("inline.toml", "[systems.sms.timeout]\nattempt = \"1s\"\n").unwrap();
    let err = http_system(&config, "sms").unwrap_err().to_string();
    assert!(err.contains("no base_url"), "{err}");
}

#[test]
fn client_timeouts_within_the_attempt_build() {
    let config = Config::parse(
        "t.toml",
        "[systems.a]\nbase_url = \"http://127.0.0.1:1\"\nretry = \"none\"\n[systems.a.timeout]\nattempt = \"2s\"\nconnect = \"2s\"\nread = \"1s\"\n",
    )
    .unwrap();
    assert_eq!(config.lint(), vec![]);
    assert!(http_system(&config, "a").is_ok());
}

#[test]
fn lint_and_the_http_client_agree_on_base_urls() {
    for url in [
        "http://x",
        "https://api.example.com/v1/",
        "http://[::1",
        "https://h/?q=1",
        "ftp://h",
        "localhost:8080",
    ] {
        let config = Config::parse("t.toml", format!("[systems.a]\nbase_url = \"{url}\"\n")).unwrap();
        let clean = !ballast_config::has_errors(&config.lint());
        assert_eq!(http_system(&config, "a").is_ok(), clean, "{url}");
    }
}

#[test]
fn a_refused_base_url_keeps_its_secrets() {
    let config =
        Config::parse("t.toml", "[systems.a]\nbase_url = \"ftp://app:s3cret@h/?token=s3cret\"\n").unwrap();
    let refused = http_system(&config, "a").unwrap_err().to_string();
    assert!(!refused.contains("s3cret"), "{refused}");
}

#[test]
fn leaving_409_in_flight_out_of_retry_on_turns_it_off() {
    let text = "[systems.pay]\nbase_url = \"http://a/\"\ndedupes_by_key = true\nkey_ttl = \"1d\"\n[systems.pay.retry]\nretry_on = [\"5xx\"]\n";
    let policy_on = http_system(&Config::parse("t.toml", text).unwrap(), "pay").unwrap();
    assert!(!policy_on.retry_on().conflict_in_flight, "left out means off");
    let default =
        Config::parse("t.toml", "[systems.pay]\nbase_url = \"http://a/\"\ndedupes_by_key = true\n").unwrap();
    assert!(http_system(&default, "pay").unwrap().retry_on().conflict_in_flight, "on by default");
}

#[test]
fn a_route_s_own_timeout_reaches_the_built_system() {
    let text = r#"[systems.reports]
base_url = "http://127.0.0.1:1/v2/"

[systems.reports.timeout]
attempt = "1s"

[systems.reports.routes]
"GET /reports/*" = { kind = "read", timeout = "500ms" }
"#;
    let config = Config::parse("t.toml", text).unwrap();
    let system = http_system(&config, "reports").unwrap();
    let route = system.route(&http::Method::GET, "reports/2026/q4").unwrap();
    assert_eq!((route.name(), route.attempt_timeout()), ("GET /reports/*", Some(Duration::from_millis(500))));
}
