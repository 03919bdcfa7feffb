//! Behaviour of the loader, the checker and the explainer on files: one bad
//! fixture per rule, the shipped example, output snapshots, and a property
//! test that random and mutated documents never panic.

use std::time::Duration;

use ballast_config::{report, Config};
use proptest::prelude::*;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/ballast.toml");

/// `(rule id or "", severity, line, column)` of every finding of `fixture`.
/// System `name`'s running policy, as the composition root builds it: the
/// checked builder, built. Lint runs the core's own checks, so a builder the
/// checker hands out builds.
fn policy(config: &Config, name: &str) -> Result<ballast::Policy, ballast_config::ConfigError> {
    config.policy_builder(name).map(|builder| builder.build().expect("a checked builder builds"))
}

/// Every system's running policy, by name.
fn policies(
    config: &Config,
) -> Result<std::collections::BTreeMap<String, ballast::Policy>, ballast_config::ConfigError> {
    config.system_names().map(|name| Ok((name.to_owned(), policy(config, name)?))).collect()
}

fn findings(fixture: &str) -> Vec<(String, String, usize, usize)> {
    let config = Config::load(format!("tests/fixtures/{fixture}")).expect("fixture loads");
    config
        .lint()
        .into_iter()
        .map(|f| {
            let at = f.location.expect("located");
            (
                f.rule.map(|r| r.id().to_owned()).unwrap_or_default(),
                f.severity.to_string(),
                at.line,
                at.column,
            )
        })
        .collect()
}

/// The first error located at `line`.
fn error_at(findings: &[ballast_config::Finding], line: usize) -> &ballast_config::Finding {
    findings
        .iter()
        .find(|f| f.location.map(|l| l.line) == Some(line) && f.is_error())
        .unwrap_or_else(|| panic!("no error at line {line}: {findings:#?}"))
}

fn expect(fixture: &str, rule: &str, severity: &str, line: usize, column: usize) {
    let got = findings(fixture);
    let want = (rule.to_owned(), severity.to_owned(), line, column);
    assert!(got.contains(&want), "{fixture}: expected {want:?} among {got:?}");
}

#[test]
fn one_fixture_per_rule_names_the_rule_and_the_value() {
    expect("re3.toml", "R-RES-RE-3", "error", 2, 16);
    expect("re4_error.toml", "R-RES-RE-4", "error", 1, 15);
    expect("re4_warning.toml", "R-RES-RE-4", "warning", 2, 15);
    expect("x3_backoff.toml", "R-RES-RE-X3", "error", 3, 11);
    expect("x3_zero.toml", "R-RES-RE-X3", "error", 3, 15);
    expect("x3_floor.toml", "R-RES-RE-X3", "error", 3, 15);
    expect("x3_floor.toml", "R-RES-RE-X3", "error", 4, 13);
    expect("x3_floor.toml", "R-RES-RE-X3", "error", 8, 13);
    expect("x2.toml", "R-RES-RE-X2", "error", 3, 20);
    expect("x4.toml", "R-RES-RE-X4", "error", 5, 11);
    expect("cb1.toml", "R-RES-CB-1", "error", 2, 9);
    expect("re2_order.toml", "R-RES-RE-2", "error", 2, 9);
    expect("re1_note.toml", "R-RES-RE-1", "note", 2, 18);
    expect("re1_ttl.toml", "R-RES-RE-1", "error", 7, 11);
    expect("range.toml", "", "error", 3, 13);
    expect("range_limit.toml", "", "error", 2, 9);
    expect("timeout_client.toml", "", "error", 3, 11);
    expect("timeout_client.toml", "", "error", 4, 8);
}

#[test]
fn a_delay_under_the_floor_or_a_cap_without_room_to_grow_is_refused_under_x3() {
    let got = findings("x3_floor.toml");
    let x3 = |line| got.iter().filter(|f| f.0 == "R-RES-RE-X3" && f.2 == line).count();
    // sms: first_delay 1 ms is under the floor (line 3), and max_delay 1 ms
    // leaves no room to grow (line 4): both reported at once.
    assert_eq!((x3(3), x3(4)), (1, 1), "{got:?}");
    // mail: max_delay = first_delay would be a constant delay (line 8).
    assert_eq!(x3(8), 1, "{got:?}");
    let config = Config::load("tests/fixtures/x3_floor.toml").unwrap();
    assert!(policy(&config, "sms").is_err() && policy(&config, "mail").is_err());
}

#[test]
fn client_timeouts_longer_than_the_attempt_are_errors_and_not_built() {
    let config = Config::load("tests/fixtures/timeout_client.toml").unwrap();
    let findings = config.lint();
    let at = |key: &str| findings.iter().find(|f| f.message.starts_with(&format!("`timeout.{key}`")));
    let connect = at("connect").expect("connect > attempt is an error");
    assert!(connect.help.contains("at most 2s"), "{}", connect.help);
    assert!(at("read").is_some(), "read > attempt is an error: {findings:?}");
    assert!(policy(&config, "sber").is_err(), "a system with lint errors is not built");

    // The default attempt timeout (5 s) bounds them too; equal is fine.
    let config = Config::parse("t.toml", "[systems.a.timeout]\nread = \"6s\"\nconnect = \"5s\"\n").unwrap();
    let found: Vec<_> =
        config.lint().into_iter().filter(|f| f.is_error()).map(|f| f.location.unwrap().line).collect();
    assert_eq!(found, [2]);
    let config = Config::parse(
        "t.toml",
        "[systems.a]\nbase_url = \"http://127.0.0.1:1\"\nretry = \"none\"\n[systems.a.timeout]\nattempt = \"2s\"\nconnect = \"2s\"\nread = \"1s\"\n",
    )
    .unwrap();
    assert_eq!(config.lint(), vec![]);
}

#[test]
fn zero_timeouts_remain_errors() {
    for (key, line, column) in [("attempt", 2, 11), ("connect", 3, 11), ("read", 4, 8)] {
        let text = format!(
            "[systems.a.timeout]\nattempt = \"{}\"\nconnect = \"{}\"\nread = \"{}\"\n",
            if key == "attempt" { "0s" } else { "2s" },
            if key == "connect" { "0s" } else { "1s" },
            if key == "read" { "0s" } else { "1s" },
        );
        let errors: Vec<_> = Config::parse("t.toml", text)
            .unwrap()
            .lint()
            .into_iter()
            .filter(|f| f.is_error())
            .map(|f| f.location.map(|l| (l.line, l.column)))
            .collect();
        assert_eq!(errors, [Some((line, column))], "zero {key}");
    }
}

#[test]
fn the_issue_example_gets_the_window_warning_and_no_error() {
    // The note: dedupes_by_key is not declared, so only reads are retried.
    assert_eq!(
        findings("re4_warning.toml"),
        vec![("R-RES-RE-4".into(), "warning".into(), 2, 15), ("R-RES-RE-1".into(), "note".into(), 2, 15)]
    );
}

#[test]
fn unknown_keys_are_refused_with_a_suggestion() {
    let err = Config::load("tests/fixtures/unknown_key.toml").unwrap_err();
    let found = err.findings();
    assert_eq!(found.len(), 1);
    let at = found[0].location.unwrap();
    assert_eq!((at.line, at.column), (3, 1));
    assert!(found[0].help.contains("did you mean `retry_on`?"), "{}", found[0].help);
}

#[test]
fn check_reports_unknown_keys_and_wrong_types_with_the_rules() {
    let checked = Config::check_file("tests/fixtures/unknown_and_rules.toml").expect("TOML parses");
    let got: Vec<_> = checked
        .findings
        .iter()
        .map(|f| {
            let at = f.location.unwrap();
            (f.rule.map(|r| r.id()), f.severity.to_string(), at.line, at.column)
        })
        .collect();
    let error = |rule, line, column| (rule, "error".to_owned(), line, column);
    assert_eq!(
        got,
        [
            error(None, 2, 12),               // critical = "yes"
            error(Some("R-RES-RE-4"), 6, 15), // the window of 8 attempts
            error(Some("R-RES-RE-3"), 7, 16), // max_attempts = 8
            error(None, 8, 1),                // retry-on
            error(None, 12, 9),               // limit = "eight", not also "limit is missing"
        ]
    );
    assert!(checked.findings[3].help.contains("did you mean `retry_on`?"));
    // The library still refuses to hand out such a Config.
    assert_eq!(Config::load("tests/fixtures/unknown_and_rules.toml").unwrap_err().findings().len(), 3);
    // Broken TOML and unreadable files are the only hard failures.
    assert!(Config::check("t.toml", "[systems.sber\n").is_err());
    assert!(Config::check_file("tests/fixtures/no-such-file.toml").is_err());
}

#[test]
fn wrong_types_and_bad_syntax_are_located() {
    let err = Config::parse("t.toml", "[systems.sber.timeout]\nattempt = \"5 parsecs\"\n").unwrap_err();
    let f = &err.findings()[0];
    assert_eq!(f.location.map(|l| (l.line, l.column)), Some((2, 11)));
    assert!(f.message.contains("systems.sber.timeout.attempt"), "{}", f.message);

    let err = Config::parse("t.toml", "[systems.sber\nx = 1\n").unwrap_err();
    assert_eq!(err.findings()[0].location.map(|l| l.line), Some(1));
}

#[test]
fn the_shipped_example_is_clean_and_builds() {
    let config = Config::load(EXAMPLE).expect("example loads");
    assert_eq!(config.lint(), vec![], "examples/ballast.toml must lint clean");
    let policies = policies(&config).expect("every policy builds");
    assert_eq!(policies.len(), 3);
    assert_eq!(policies["sber"].retry().max_attempts(), 3);
    assert!(policies["sber"].worst_case() <= ballast::WINDOW_WARNING);
    let queue = config.queue().expect("queue settings");
    assert_eq!(queue.schedule.max_attempts, 10);
}

#[test]
fn a_system_with_errors_is_not_built() {
    let config = Config::load("tests/fixtures/re3.toml").unwrap();
    match policy(&config, "sber").unwrap_err() {
        ballast_config::ConfigError::Refused { findings, .. } => {
            assert!(findings.iter().any(|f| f.rule == Some(ballast::Rule::Re3)), "{findings:?}")
        }
        other => panic!("expected Refused, got {other}"),
    }
    let err = policy(&config, "sbr").unwrap_err().to_string();
    assert!(err.contains("did you mean `sber`"), "{err}");
}

#[test]
fn human_and_json_output_snapshots() {
    let config = Config::load("tests/fixtures/bad.toml").unwrap();
    let findings = config.lint();
    insta::assert_snapshot!("bad.human", report::human(&findings, Some(config.source())));
    insta::assert_snapshot!("bad.json", report::json(&findings));

    let err = Config::load("tests/fixtures/unknown_key.toml").unwrap_err();
    insta::assert_snapshot!("unknown_key.human", report::human(&err.findings(), err.input()));
}

#[test]
fn explain_snapshot_of_the_example() {
    let config = Config::load("../../examples/ballast.toml").unwrap();
    insta::assert_snapshot!("example.explain", config.explain(None).unwrap().to_string());
    assert!(config.explain(Some("nope")).is_err());
}

/// Values that stress the loader: wrong types, extremes, odd units.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("1e308".to_owned()),
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        Just("18446744073709551615".to_owned()),
        Just("9223372036854775807".to_owned()),
        Just("\"18446744073709551615d\"".to_owned()),
        Just("\"0ms\"".to_owned()),
        Just("\"999999999h\"".to_owned()),
        Just("true".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("[\"4xx\", \"all\"]".to_owned()),
        Just("\"consecutive\"".to_owned()),
        Just("\"sampling\"".to_owned()),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        "[a-z0-9\"]{0,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        if let Ok(config) = Config::parse("random.toml", text) {
            let _ = config.lint();
            let _ = config.explain(None);
            let _ = policies(&config);
        }
    }

    #[test]
    fn mutated_example_never_panics(line in 0usize..120, val in value(), cut in 0usize..4000, ch in any::<char>()) {
        let example = std::fs::read_to_string(EXAMPLE).unwrap();
        let mut lines: Vec<String> = example.lines().map(str::to_owned).collect();
        // Replace one key's value ...
        let i = line % lines.len();
        if let Some(eq) = lines[i].find(" = ") {
            let key = lines[i][..eq].to_owned();
            lines[i] = format!("{key} = {val}");
        }
        let mut text = lines.join("\n");
        // ... and insert one character somewhere.
        let at = (0..=cut.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.insert(at, ch);
        for doc in [lines.join("\n"), text] {
            if let Ok(config) = Config::parse("mutated.toml", doc) {
                let findings = config.lint();
                let _ = report::human(&findings, Some(config.source()));
                let _ = report::json(&findings);
                let _ = config.explain(None).map(|e| e.to_string());
                let _ = policies(&config);
                let _ = config.queue();
            }
        }
    }
}

#[test]
fn lint_and_the_http_client_agree_on_base_urls() {
    for (url, usable) in [
        ("http://x", true),
        ("https://api.example.com/v1/", true),
        ("http://[::1]:8080", true),
        ("http://[::1", false),
        ("http://host:99999", false),
        ("http://a b", false),
        ("https://h/?q=1", false),
        ("https://h/#top", false),
        ("ftp://h", false),
        ("localhost:8080", false),
    ] {
        let config = Config::parse("t.toml", format!("[systems.a]\nbase_url = \"{url}\"\n")).unwrap();
        let findings = config.lint();
        assert_eq!(!ballast_config::has_errors(&findings), usable, "{url}: {findings:?}");
        assert_eq!(ballast_vocab::http::parse_base_url(url).is_ok(), usable, "{url}");
    }
}

#[test]
fn secrets_in_urls_stay_out_of_findings() {
    let config = Config::parse(
        "t.toml",
        "[queue]\nurl = \"mysql://app:s3cret@db/q?password=s3cret\"\n[systems.a]\nbase_url = \"ftp://app:s3cret@h/?token=s3cret\"\n",
    )
    .unwrap();
    let findings = config.lint();
    assert_eq!(findings.iter().filter(|f| f.is_error()).count(), 2, "{findings:?}");
    for f in &findings {
        assert!(!f.message.contains("s3cret") && !f.help.contains("s3cret"), "{f:?}");
    }
    // Findings end up in logs (`ballast serve` prints them): the quoted lines too.
    let human = report::human(&findings, Some(config.source()));
    assert!(!human.contains("s3cret"), "{human}");
    assert!(human.contains("url = \"mysql://app:***@db/q?password=***\""), "{human}");
}

#[test]
fn a_line_with_any_character_before_a_url_is_quoted() {
    // A character of several bytes right before the scheme ends the scheme.
    let config = Config::parse("t.toml", "[systems.a]\nbase_url = \"h\u{de642}ttp://u:s3cret@h\"\n").unwrap();
    let human = report::human(&config.lint(), Some(config.source()));
    assert!(human.contains("t.toml:2:12") && human.contains("ttp://u:***@h"), "{human}");
}

#[test]
fn control_characters_from_the_file_are_escaped_in_human_output() {
    // Raw controls (invalid TOML, quoted back in the source line), a key named
    // with escapes, and a system named with escapes.
    let raw =
        Config::check("t.toml", "# \u{1b}]0;pwned\u{7}\n[systems.a.retry]\nmax_attempts = 8\n").unwrap_err();
    let key = Config::check("t.toml", "[systems.a.retry]\n\"x\\u001b[2J\" = 1\n").unwrap();
    let named =
        Config::parse("t.toml", "[systems.\"a\\u001b[31m\\u0007\".retry]\nmax_attempts = 8\n").unwrap();
    let outputs = [
        report::human(&raw.findings(), raw.input()),
        report::human(&key.findings, Some(&key.source)),
        report::human(&named.lint(), Some(named.source())),
        named.explain(None).unwrap().to_string(),
    ];
    for out in outputs {
        assert!(!out.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{out:?}");
        assert!(out.contains("\\u{1b}"), "the escape is shown, not dropped: {out}");
    }
}

#[test]
fn a_file_larger_than_any_configuration_is_refused_without_reading_it_all() {
    let err = Config::check_file("/dev/zero").unwrap_err();
    assert!(matches!(err, ballast_config::LoadError::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("larger than"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    let value = "x".repeat(ballast_config::MAX_CONFIG_BYTES as usize);
    std::fs::write(&big, format!("[queue]\nurl = \"{value}\"\n")).unwrap();
    assert!(matches!(Config::load(&big), Err(ballast_config::LoadError::TooLarge { .. })));
}

#[test]
fn the_caret_stands_under_the_value_after_tabs_and_wide_characters() {
    let config =
        Config::check("t.toml", "[systems.a]\n\tretry = { \"日本\" = 1, max_attempts = 8 }\n").unwrap();
    let human = report::human(&config.findings, Some(&config.source));
    let re3 = human.split("\n\n").find(|f| f.contains("R-RES-RE-3")).expect("the R-RES-RE-3 finding");
    let lines: Vec<&str> = re3.lines().collect();
    let quoted = lines.iter().position(|l| l.starts_with("2 | ")).expect("the quoted line");
    // Terminal columns: a tab is drawn as spaces, 日 and 本 take two columns each.
    let column = |text: &str, at: usize| {
        text[..at]
            .chars()
            .map(|c| {
                if c == '\t' {
                    4
                } else if c > '\u{2e80}' {
                    2
                } else {
                    1
                }
            })
            .sum::<usize>()
    };
    let source = lines[quoted];
    let caret = lines[quoted + 1];
    assert!(!source.contains('\t'), "{re3}");
    assert_eq!(column(caret, caret.find('^').unwrap()), column(source, source.find('8').unwrap()), "{re3}");
    assert!(re3.contains("t.toml:2:37"), "the location counts characters in the file: {re3}");
}

#[test]
fn serve_gateway_alerts_and_retention_keys_are_checked() {
    let checked =
        Config::check("t.toml", include_str!("fixtures/serve_gateway_alerts_retention.toml")).unwrap();
    let at = |line: usize| {
        checked
            .findings
            .iter()
            .filter(|f| f.location.map(|l| l.line) == Some(line))
            .map(|f| f.message.clone())
            .collect::<Vec<_>>()
    };
    assert!(at(4).iter().any(|m| m.contains("retain_completed")), "{:?}", checked.findings);
    assert!(at(7).iter().any(|m| m.contains("protect_metrics")), "{:?}", checked.findings);
    assert!(at(10).iter().any(|m| m.contains("without a token")), "{:?}", checked.findings);
    assert!(at(11).iter().any(|m| m.contains("max_body")), "{:?}", checked.findings);
    assert!(at(15).iter().any(|m| m.contains("\"slak\" does not exist")), "{:?}", checked.findings);
    assert!(at(17).iter().any(|m| m.contains("`url_env` is missing")), "{:?}", checked.findings);
    assert!(at(19).iter().any(|m| m.contains("do not deduplicate")), "{:?}", checked.findings);
    assert!(at(20).iter().any(|m| m.contains("unknown key `retries`")), "{:?}", checked.findings);
    let slack_help = checked.findings.iter().find(|f| f.message.contains("slak")).unwrap();
    assert!(slack_help.help.contains("did you mean \"slack\""), "{}", slack_help.help);

    let good = Config::parse(
        "t.toml",
        "[gateway]\nlisten = \"0.0.0.0:9465\"\ntoken_env = \"GW_TOKEN\"\nmax_body = \"512KiB\"\n[[alerts.webhook]]\nurl_env = \"AM_URL\"\nformat = \"alertmanager\"\n",
    )
    .unwrap();
    let findings = good.lint();
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert!(findings.iter().all(|f| !f.is_error()), "{findings:?}");
    assert!(findings.iter().any(|f| f.message.contains("no [systems.*]")), "{findings:?}");
    assert!(
        findings.iter().any(|f| f.message.contains("[gateway] listens beyond this host over plain HTTP")),
        "a listener beyond loopback without TLS is warned of: {findings:?}"
    );
    assert_eq!(good.gateway().unwrap().unwrap().max_body, 512 * 1024);
    let hooks = good.alerts().unwrap();
    assert_eq!((hooks[0].format, hooks[0].dedupes_by_key), (ballast_config::AlertFormat::Alertmanager, true));
}

/// The gateway's callbacks and waiting callers: what makes them unsafe is refused.
#[test]
fn callbacks_and_waiting_callers_are_checked() {
    let errors_in = |text: &str| -> Vec<String> {
        let findings = Config::parse("t.toml", text).unwrap().lint();
        findings.into_iter().filter(|f| f.is_error()).map(|f| f.message).collect()
    };
    let errors = |gateway: &str| {
        errors_in(&format!("[gateway]\n{gateway}\n[systems.pay]\nbase_url = \"http://127.0.0.1:8080/\"\n"))
    };
    assert!(errors("callback_hosts = [\"hooks.example\"]")[0].contains("without `callback_secret_env`"));
    assert!(errors("callback_hosts = [\"https://hooks.example/x\"]\ncallback_secret_env = \"S\"")[0]
        .contains("not a host name"));
    assert!(errors("max_connections = 100\nmax_waiters = 100")[0].contains("could hold every connection"));
    assert!(errors(
        "callback_hosts = [\"hooks.example:8443\"]\ncallback_secret_env = \"S\"\nmax_waiters = 10"
    )
    .is_empty());
    let route = |value: &str| {
        errors_in(&format!(
            "[systems.pay]\nbase_url = \"http://127.0.0.1:8080/\"\ndedupes_by_key = true\n[systems.pay.routes]\n\"POST /refunds\" = {value}\n"
        ))
    };
    assert!(route("{ kind = \"write_once\", follow = {} }")[0].contains("not a keyed_write"));
    assert!(route("{ kind = \"keyed_write\", follow = { field = \"status\" } }")[0].contains("needs `done`"));
    assert!(route("{ kind = \"keyed_write\", follow = { deadline = \"0s\" } }")[0].contains("deadline"));
    assert!(
        route("{ kind = \"keyed_write\", follow = { field = \"op.status\", done = [\"ok\"] } }").is_empty()
    );
    let small = Config::parse("t.toml", "[gateway]\nmax_connections = 64\n").unwrap();
    assert_eq!(small.gateway().unwrap().unwrap().max_waiters, 32, "half the connections unless set");
    let default = Config::parse("t.toml", "[gateway]\n").unwrap();
    assert_eq!(default.gateway().unwrap().unwrap().max_waiters, 512);
}

/// The gateway's event loops and its answer buffer.
#[test]
fn event_loops_and_the_answer_buffer_are_checked() {
    let errors = |gateway: &str| -> Vec<String> {
        let text = format!("[gateway]\n{gateway}\n[systems.pay]\nbase_url = \"http://127.0.0.1:8080/\"\n");
        let findings = Config::parse("t.toml", text).unwrap().lint();
        findings.into_iter().filter(|f| f.is_error()).map(|f| f.message).collect()
    };
    assert!(errors("workers = 0")[0].contains("`workers` is outside 1..=256"));
    assert!(errors("workers = 1000")[0].contains("`workers`"));
    assert!(errors("buffer_answer = \"0B\"")[0].contains("`buffer_answer` is outside"));
    assert!(errors("buffer_answer = \"1GiB\"")[0].contains("`buffer_answer` is outside"));
    assert!(errors("workers = 4\nbuffer_answer = \"256KiB\"").is_empty());
    let set = Config::parse("t.toml", "[gateway]\nworkers = 4\nbuffer_answer = \"256KiB\"\n").unwrap();
    let set = set.gateway().unwrap().unwrap();
    assert_eq!((set.workers, set.buffer_answer), (Some(4), 256 << 10));
    let default = Config::parse("t.toml", "[gateway]\n").unwrap().gateway().unwrap().unwrap();
    assert_eq!((default.workers, default.buffer_answer), (None, 64 << 10), "a loop per core, 64 KiB");
}

/// A system that says nothing of a part gets the guide's; `"none"` leaves
/// it out, and `explain` says which is which.
#[test]
fn an_unconfigured_system_gets_the_guide_s_composition_and_none_leaves_a_part_out() {
    let config = Config::parse(
        "t.toml",
        "[systems.pay]\nbase_url = \"http://127.0.0.1:1\"\n\n[systems.sms]\nbase_url = \"http://127.0.0.1:2\"\nretry = \"none\"\nbreaker = \"none\"\nbulkhead = \"none\"\n",
    )
    .unwrap();
    let pay = policy(&config, "pay").unwrap();
    assert_eq!(pay.retry().max_attempts(), 3);
    assert!(pay.breaker().is_some(), "the guide's count breaker");
    assert_eq!(pay.bulkhead_limit(), Some(8));
    assert_eq!(pay.timeout().attempt(), Duration::from_secs(5));
    let sms = policy(&config, "sms").unwrap();
    assert_eq!((sms.retry().max_attempts(), sms.breaker().is_some(), sms.bulkhead_limit()), (1, false, None));

    let explained = config.explain(None).unwrap().to_string();
    let line = |system: &str| {
        let at = explained.find(&format!("system `{system}`")).unwrap();
        explained[at..].lines().nth(1).unwrap().to_owned()
    };
    assert_eq!(line("pay").matches("[the guide's default").count(), 4, "{}", line("pay"));
    assert!(line("pay")
        .contains("breaker (count: opens at 50% failures of the last 50 calls, half-open after 30s)"));
    let sms_line = line("sms");
    assert!(
        sms_line.contains("retry (none: 1 attempt, `retry = \"none\"`)")
            && sms_line.contains("no breaker")
            && sms_line.contains("no bulkhead"),
        "{sms_line}"
    );
    let bad = Config::check("t.toml", "[systems.x]\nbase_url = \"http://a/\"\nbreaker = \"off\"\n").unwrap();
    let finding = bad.findings.iter().find(|f| f.is_error()).expect("only \"none\" leaves a part out");
    assert!(finding.message.contains("\"none\"") && finding.location.unwrap().line == 3, "{finding:?}");
}

#[test]
fn a_base_url_at_one_of_serve_s_own_listeners_is_an_error() {
    for (listen, url, loops) in [
        ("[gateway]\n", "http://127.0.0.1:9465/", true),
        ("[gateway]\nlisten = \"0.0.0.0:8080\"\ntoken_env = \"T\"\n", "http://localhost:8080/api", true),
        ("", "http://127.0.0.1:9464", true),
        ("[serve]\nlisten = \"[::1]:7000\"\n", "http://[::1]:7000/", true),
        // F13: every spelling of this host's own address.
        ("[gateway]\n", "http://0.0.0.0:9465/", true),
        ("[gateway]\n", "http://[::ffff:127.0.0.1]:9465/", true),
        ("[gateway]\nlisten = \"[::1]:9465\"\n", "http://[::]:9465/", true),
        ("[gateway]\n", "http://127.0.0.1:9466/", false),
        ("", "http://10.0.0.1:9464/", false),
        ("[gateway]\nlisten = \"127.0.0.1:0\"\n", "http://127.0.0.1:0/", false),
    ] {
        let text = format!("{listen}[systems.pay]\nbase_url = \"{url}\"\n");
        let config = Config::parse("t.toml", text.as_str()).unwrap();
        let found = config.lint().into_iter().find(|f| f.message.contains("`ballast serve` itself"));
        assert_eq!(found.is_some(), loops, "{text}");
        if let Some(f) = found {
            assert!(f.is_error() && f.location.unwrap().line == text.lines().count(), "{f:?}");
        }
    }
}

#[test]
fn durable_settings_are_one_value_for_lint_and_runtime() {
    let config = Config::parse(
        "t.toml",
        "[queue]\nurl = \"sqlite://q.db\"\nmax_attempts = 3\npoll_interval = \"1s\"\nmax_age = \"2h\"\n[systems.pay]\nbase_url = \"http://127.0.0.1:1\"\ndedupes_by_key = true\nkey_ttl = \"30s\"\n",
    )
    .unwrap();
    let settings = config.queue().unwrap();
    let explained = config.explain(Some("pay")).unwrap();
    let durable = explained.systems[0].durable.as_ref().unwrap();
    assert_eq!(settings.schedule, durable.schedule);
    assert_eq!((settings.schedule.max_attempts, settings.schedule.max_age), (3, Duration::from_secs(7200)));
    // The window lint checks key_ttl against is the schedule's.
    let needed = settings.schedule.key_lifetime(explained.systems[0].in_memory.window);
    assert_eq!(explained.systems[0].key_needed, needed);
    let re1 = config.lint().into_iter().find(|f| f.rule.map(|r| r.id()) == Some("R-RES-RE-1")).unwrap();
    assert!(re1.is_error() && re1.message.contains("key_ttl 30s"), "{re1:?}");

    let zero = Config::parse("t.toml", "[queue]\nurl = \"sqlite://q.db\"\nmax_age = \"0s\"\n").unwrap();
    assert!(zero.lint().iter().any(|f| f.is_error() && f.message.contains("`max_age` is zero")));
}

#[test]
fn leaving_409_in_flight_out_of_a_deduplicating_system_s_retry_on_is_noted() {
    let text = |retry_on: &str| {
        format!("[systems.pay]\nbase_url = \"http://a/\"\ndedupes_by_key = true\nkey_ttl = \"1d\"\n[systems.pay.retry]\nretry_on = {retry_on}\n")
    };
    let notes = |retry_on: &str| {
        let config = Config::parse("t.toml", text(retry_on)).unwrap();
        config.lint().into_iter().filter(|f| f.message.contains("409-in-flight")).collect::<Vec<_>>()
    };
    let without = notes("[\"5xx\", \"timeout\"]");
    assert_eq!(without.len(), 1);
    assert_eq!(
        (without[0].severity, without[0].rule.map(|r| r.id())),
        (ballast::Severity::Note, Some("R-RES-RE-X2"))
    );
    assert!(notes("[\"5xx\", \"409-in-flight\"]").is_empty());
}

#[test]
fn the_security_keys_are_checked() {
    let checked = Config::check("t.toml", include_str!("fixtures/security_keys.toml")).unwrap();
    let at = |line: usize| error_at(&checked.findings, line).message.clone();
    assert!(at(4).contains("seal_key_env"));
    assert!(at(5).contains("X Card"));
    assert!(at(8).contains("body_read_timeout"));
    assert!(at(9).contains("session_ttl"));
    assert!(at(10).contains("not a host name"));
    assert!(at(13).contains("body_read_timeout"));
    // The gateway's `Host` names are checked as the admin listener's are.
    assert!(at(15).contains("\"http://gateway.internal\" is not a host name"), "{}", at(15));
    assert!(at(23).contains("idempotency header"));
    assert!(at(24).contains("X-Plain"), "a value written in the file is refused");
    assert!(at(25).contains("names no `env`"));
    let plain = checked.findings.iter().find(|f| f.message.contains("X-Plain")).unwrap();
    assert!(plain.help.contains("env"), "{}", plain.help);
    assert!(
        !checked.findings.iter().any(|f| f.location.map(|l| l.line) == Some(22)),
        "{:#?}",
        checked.findings
    );
}

/// `[telemetry]`: each value that could not export traces is a located
/// error; a clean section gives the settings, the variables over them.
#[test]
fn the_telemetry_keys_are_checked() {
    let text = include_str!("fixtures/telemetry_keys.toml");
    let checked = Config::check("t.toml", text).unwrap();
    let at = |line: usize| {
        let found = error_at(&checked.findings, line);
        (found.message.clone(), found.help.clone())
    };
    assert!(at(3).0.contains("scheme must be http or https"), "{:?}", at(3));
    assert!(at(4).0.contains("credentials belong in a header"), "{:?}", at(4));
    assert!(at(5).1.contains("4318"), "{:?}", at(5));
    assert!(at(6).1.contains("did you mean \"parentbased_traceidratio\"?"), "{:?}", at(6));
    assert!(at(7).0.contains("not a ratio"), "{:?}", at(7));
    assert!(at(8).0.contains("queue_size"), "{:?}", at(8));
    assert!(at(9).0.contains("schedule_delay"), "{:?}", at(9));
    assert!(at(12).0.contains("not an HTTP header name"), "{:?}", at(12));
    assert!(at(13).0.contains("names no environment variable"), "{:?}", at(13));
    assert!(at(16).0.contains("service_name"), "{:?}", at(16));
    assert!(
        Config::parse("t.toml", text).unwrap().telemetry().is_err(),
        "a section with errors is never used"
    );

    let typo = Config::check("t.toml", "[telemetry]\nsample = \"always_on\"\n").unwrap();
    let unknown = typo.findings.iter().find(|f| f.is_error()).unwrap();
    assert!(unknown.help.contains("did you mean `sampler`?"), "{:#?}", typo.findings);

    let clean = r#"
[telemetry]
endpoint = "https://collector.internal:4318/"
sampler = "parentbased_traceidratio"
sampler_arg = 0.25
[telemetry.headers]
x-api-key = { env = "COLLECTOR_KEY" }
"#;
    let config = Config::parse("t.toml", clean).unwrap();
    assert!(!ballast_config::has_errors(&config.lint()), "{:#?}", config.lint());
    let settings = config.telemetry().unwrap();
    assert_eq!(settings.traces_endpoint.as_deref(), Some("https://collector.internal:4318/v1/traces"));
    let env = |var: &str| (var == "COLLECTOR_KEY").then(|| "k-1".to_owned());
    let export = settings.resolve(env).unwrap().export.unwrap();
    assert_eq!(export.headers, [("x-api-key".to_owned(), "k-1".to_owned())]);
    assert_eq!(export.spans.sampler.to_string(), "parentbased_traceidratio 0.25");
}

#[test]
fn a_rate_limit_is_built_checked_and_explained() {
    let text = "[systems.sms]\nbase_url = \"http://127.0.0.1:1\"\nretry = \"none\"\n\n[systems.sms.rate_limit]\nrate = \"600/m\"\nburst = 5\nwait = \"200ms\"\nadaptive = true\n";
    let config = Config::parse("t.toml", text).unwrap();
    assert!(config.lint().iter().all(|f| !f.is_error()), "{:?}", config.lint());
    let limiter_of = |config: &Config| {
        let sms = policy(config, "sms").unwrap();
        let limit = *sms.rate_limiter().expect("a rate limit").limit();
        (limit.rate(), limit.get_burst(), limit.get_wait(), limit.is_adaptive())
    };
    assert_eq!(limiter_of(&config), (10.0, 5, Duration::from_millis(200), true));
    let explained = config.explain(None).unwrap().to_string();
    assert!(
        explained.contains("rate limit (600/m, burst 5, waits up to 200ms, adaptive, per replica: N replicas send N times it)"),
        "{explained}"
    );
    assert!(explained.contains("attempt 1  may wait     200ms for a rate-limit permit"), "{explained}");

    for (rate, why) in [
        ("100", "has no period"),
        ("fast/s", "is not a whole number"),
        ("10/day", "is not a period"),
        ("0/s", "no attempt or no period"),
    ] {
        let text = format!("[systems.sms]\nbase_url = \"http://127.0.0.1:1\"\n\n[systems.sms.rate_limit]\nrate = \"{rate}\"\n");
        let found = Config::check("t.toml", &text).unwrap().findings;
        let error = found.iter().find(|f| f.is_error()).unwrap_or_else(|| panic!("{rate}: {found:?}"));
        assert!(error.message.contains(why) && error.location.unwrap().line == 5, "{rate}: {error:?}");
    }
    let slow = "[systems.sms]\nbase_url = \"http://127.0.0.1:1\"\nretry = \"none\"\n\n[systems.sms.rate_limit]\nrate = \"1/s\"\nwait = \"40s\"\n";
    let found = Config::check("t.toml", slow).unwrap().findings;
    let window = found.iter().find(|f| f.is_error()).expect("40 s of waiting is over the window");
    assert_eq!(window.rule.map(|r| r.id()), Some("R-RES-RE-4"), "{window:?}");
    let missing = Config::check(
        "t.toml",
        "[systems.sms]\nbase_url = \"http://a/\"\n[systems.sms.rate_limit]\nburst = 3\n",
    )
    .unwrap();
    assert!(
        missing.findings.iter().any(|f| f.is_error() && f.message.contains("rate")),
        "{:?}",
        missing.findings
    );
}

#[test]
fn routes_are_checked_built_and_explained() {
    let text = include_str!("fixtures/routes.toml");
    let config = Config::parse("t.toml", text).unwrap();
    let findings = config.lint();
    assert!(findings.iter().all(|f| !f.is_error()), "{findings:?}");
    let note = |needle: &str| {
        findings
            .iter()
            .find(|f| f.message.contains(needle))
            .unwrap_or_else(|| panic!("{needle}: {findings:?}"))
    };
    let read = note("POST /orders/search is declared read");
    assert_eq!((read.severity.to_string(), read.location.unwrap().line), ("note".to_owned(), 10));
    let keyed = note("POST /payments requires a key, but the system does not deduplicate");
    assert_eq!(keyed.location.unwrap().line, 9);
    let explained = config.explain(None).unwrap().to_string();
    assert!(explained.contains("GET /reports/* → read, 500ms per attempt"), "{explained}");

    for (route, why, line) in [
        ("\"POST/payments\" = \"read\"", "is not `METHOD /path`", 3),
        ("\"POST /payments\" = \"keyed\"", "route kind \"keyed\" does not exist", 3),
        ("\"POST /a/*/b\" = \"read\"", "`*` may only end a template", 3),
        ("\"GET /slow\" = { kind = \"read\", timeout = \"10s\" }", "outside the system's", 3),
        ("\"POST /a\" = \"read\"\n\"post /a\" = \"write_once\"", "declared twice", 4),
        ("\"PUT /c/{id}\" = { kind = \"write_once\", sequence = \"c/{cid}\" }", "has no parameter {cid}", 3),
        ("\"GET /c/{id}\" = { kind = \"read\", sequence = \"c/{id}\" }", "a sequence orders writes", 3),
    ] {
        let text = format!("[systems.pay]\nbase_url = \"http://a/\"\n[systems.pay.routes]\n{route}\n");
        let found = Config::check("t.toml", &text).unwrap().findings;
        let error = found.iter().find(|f| f.is_error()).unwrap_or_else(|| panic!("{route}: {found:?}"));
        assert!(error.message.contains(why) && error.location.unwrap().line >= line, "{route}: {error:?}");
    }
    let typo = Config::check(
        "t.toml",
        "[systems.pay]\nbase_url = \"http://a/\"\n[systems.pay.routes]\n\"POST /a\" = \"wirte_once\"\n",
    )
    .unwrap();
    assert!(
        typo.findings.iter().any(|f| f.help.contains("did you mean \"write_once\"")),
        "{:?}",
        typo.findings
    );
}

/// A part the fleet holds needs the database the fleet shares; a rate each
/// replica holds alone on a shared queue is noted with what N of them send.
#[test]
fn a_fleet_scope_needs_postgres_and_a_replica_scope_on_postgres_is_noted() {
    let system =
        "[systems.crm]\nbase_url = \"http://127.0.0.1:1/\"\n[systems.crm.rate_limit]\nrate = \"20/s\"\n";
    let fleet = "scope = \"fleet\"\n[systems.crm.breaker]\nkind = \"consecutive\"\nthreshold = 3\nscope = \"fleet\"\nquorum = 2\n";
    let lint = |queue: &str, rest: &str| {
        let text = format!("[queue]\nurl = \"{queue}\"\n{system}{rest}");
        Config::parse("t.toml", text.as_str()).unwrap().lint()
    };
    let sqlite = lint("sqlite://q.db", fleet);
    let errors: Vec<&str> = sqlite.iter().filter(|f| f.is_error()).map(|f| f.message.as_str()).collect();
    assert_eq!(errors.len(), 2, "{sqlite:?}");
    assert!(errors.iter().all(|m| m.contains("needs a PostgreSQL queue")), "{errors:?}");

    let postgres = lint("postgres://db/q", fleet);
    assert!(!postgres.iter().any(|f| f.is_error() || f.message.contains("N replicas")), "{postgres:?}");
    let text = format!("[queue]\nurl = \"postgres://db/q\"\n{system}{fleet}");
    let explained = Config::parse("t.toml", text.as_str()).unwrap().explain(None).unwrap().to_string();
    assert!(explained.contains("rate limit (20/s, held by the fleet together)"), "{explained}");
    assert!(
        explained.contains("the fleet's: opens for every replica once 2 see it failing"),
        "explain says the breaker's scope and quorum: {explained}"
    );
    let alone = lint("postgres://db/q", "");
    let note = alone.iter().find(|f| f.message.contains("N × 20/s")).expect("the note");
    assert_eq!(note.severity, ballast::Severity::Note);
    assert!(note.help.contains("scope = \"fleet\""), "{note:?}");

    let quorum_alone =
        lint("postgres://db/q", "[systems.crm.breaker]\nkind = \"consecutive\"\nthreshold = 3\nquorum = 2\n");
    assert!(
        quorum_alone.iter().any(|f| f.is_error() && f.message.contains("`quorum` applies")),
        "{quorum_alone:?}"
    );
}

/// `[queue.periodic.NAME]`: one schedule, a configured system, and retries
/// that end before the next period.
#[test]
fn periodic_calls_are_checked() {
    let errors = |periodic: &str| -> Vec<String> {
        let text = format!(
            "[queue]\nurl = \"sqlite://q.db\"\n[queue.periodic.reconcile]\n{periodic}\n[systems.pay]\nbase_url = \"http://127.0.0.1:8080/\"\n"
        );
        let findings = Config::parse("t.toml", text).unwrap().lint();
        findings.into_iter().filter(|f| f.is_error()).map(|f| f.message).collect()
    };
    let good = "system = \"pay\"\npath = \"reconcile\"\nevery = \"1h\"\nmax_attempts = 3";
    assert!(errors(good).is_empty(), "{:?}", errors(good));
    assert!(errors("system = \"pay\"\npath = \"r\"\nevery = \"1m\"\ncron = \"* * * * *\"\nmax_attempts = 1")
        [0]
    .contains("both `every` and `cron`"));
    assert!(
        errors("system = \"pay\"\npath = \"r\"\nmax_attempts = 1")[0].contains("neither `every` nor `cron`")
    );
    assert!(errors("system = \"sbr\"\npath = \"r\"\nevery = \"1h\"\nmax_attempts = 1")[0]
        .contains("\"sbr\", which is not configured"));
    assert!(errors("system = \"pay\"\npath = \"r\"\ncron = \"61 * * * *\"\nmax_attempts = 1")[0]
        .contains("does not parse"));
    assert!(errors("system = \"pay\"\npath = \"r\"\nevery = \"1h\"\nmax_attempts = 1\ncatch_up = \"some\"")
        [0]
    .contains("none of latest, all, none"));
    // The queue's ten attempts back off for far longer than a minute.
    let overlap = errors("system = \"pay\"\npath = \"r\"\nevery = \"1m\"");
    assert!(overlap[0].contains("two periods would run at once"), "{overlap:?}");
    let jittered =
        errors("system = \"pay\"\npath = \"r\"\nevery = \"1h\"\nmax_attempts = 1\njitter = \"2h\"");
    assert!(jittered[0].contains("two periods would run at once"), "{jittered:?}");
    // Pruned before the next period, a period's task could not keep a restart from running it again.
    let pruned = Config::parse(
        "t.toml",
        "[queue]\nurl = \"sqlite://q.db\"\nretain_completed = \"1h\"\n[queue.periodic.daily]\nsystem = \"pay\"\npath = \"r\"\n\
         cron = \"0 6 * * *\"\nmax_attempts = 3\n[systems.pay]\nbase_url = \"http://127.0.0.1:8080/\"\n",
    )
    .unwrap()
    .lint();
    assert!(
        pruned.iter().any(|f| f.is_error() && f.message.contains("would run its period again")),
        "{pruned:?}"
    );
    let config = Config::parse(
        "t.toml",
        format!("[queue]\nurl = \"sqlite://q.db\"\n[queue.periodic.reconcile]\n{good}\ncatch_up = \"all\"\n[systems.pay]\nbase_url = \"http://127.0.0.1:8080/\"\n"),
    )
    .unwrap();
    let periodic = &config.queue().unwrap().periodic;
    assert_eq!(periodic.len(), 1);
    assert_eq!(
        (periodic[0].name.as_str(), periodic[0].method.as_str(), periodic[0].max_attempts),
        ("reconcile", "GET", Some(3))
    );
    assert_eq!(periodic[0].catch_up, ballast_vocab::queue::CatchUp::All);
}
