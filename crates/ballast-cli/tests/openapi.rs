//! `ballast openapi import` and `ballast lint --openapi` on the real binary,
//! with a payment API written for the test (a keyed POST, a POST search, a
//! PATCH without a key, a keyed refund) and a petstore.

use std::process::Command;

const PAYMENTS: &str = "tests/fixtures/openapi/payments.yaml";
const PETSTORE: &str = "tests/fixtures/openapi/petstore.json";

fn ballast(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ballast")).args(args).output().expect("ballast runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn import_prints_every_operation_as_a_route_with_its_reason_and_line() {
    let (code, out, err) = ballast(&["openapi", "import", PAYMENTS, "--system", "pay"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "[systems.pay.routes]
\"POST /payments\"        = \"keyed_write\" # {PAYMENTS}:15: takes the idempotency header
\"POST /payments/search\" = \"read\"        # {PAYMENTS}:22: x-ballast-kind
\"GET /payments/{{id}}\"    = \"read\"        # {PAYMENTS}:30: a safe method
\"PATCH /payments/{{id}}\"  = \"write_once\"  # {PAYMENTS}:34: a write without the idempotency header
\"POST /refunds\"         = \"keyed_write\" # {PAYMENTS}:39: takes the idempotency header
"
        )
    );
    let (code, out, _) = ballast(&["openapi", "import", PETSTORE, "--system", "pets"]);
    assert_eq!(code, 0);
    let kinds: Vec<&str> = out.lines().skip(1).map(|l| l.split('#').next().unwrap().trim()).collect();
    assert_eq!(
        kinds,
        [
            "\"GET /pets\"            = \"read\"",
            "\"POST /pets\"           = \"write_once\"",
            "\"GET /pets/{petId}\"    = \"read\"",
            "\"DELETE /pets/{petId}\" = \"read\"",
        ]
    );
    // Another header name: the payment's key is then not the system's.
    let (_, out, _) =
        ballast(&["openapi", "import", PAYMENTS, "--system", "pay", "--header", "X-Request-Key"]);
    assert!(out.contains("\"POST /payments\"        = \"write_once\""), "{out}");
    let (code, _, err) = ballast(&["openapi", "import", "Cargo.toml", "--system", "pay"]);
    assert_eq!(code, 2);
    assert!(err.contains("Cargo.toml") && err.contains("not YAML or JSON"), "{err}");
}

#[test]
fn lint_holds_the_routes_to_the_document() {
    let config = "tests/fixtures/openapi/routes.toml";
    let (code, out, err) =
        ballast(&["lint", config, "--openapi", &format!("pay={PAYMENTS}"), "--format", "json"]);
    assert_eq!(code, 0, "warnings and notes only: {out}{err}");
    let findings: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let about = |needle: &str| {
        findings
            .iter()
            .find(|f| f["message"].as_str().unwrap().contains(needle))
            .unwrap_or_else(|| panic!("no finding about {needle}: {findings:#?}"))
    };
    let nothing = about("route DELETE /payments/{id} matches no operation");
    assert_eq!((nothing["file"].as_str(), nothing["line"].as_u64()), (Some(config), Some(13)), "{nothing}");
    let no_key = about("route PATCH /payments/{id} requires a key");
    assert_eq!(
        (no_key["file"].as_str(), no_key["line"].as_u64(), no_key["rule"].as_str()),
        (Some(PAYMENTS), Some(34), Some("R-RES-RE-1"))
    );
    let undeclared = about("the write POST /refunds is not declared");
    assert_eq!((undeclared["file"].as_str(), undeclared["line"].as_u64()), (Some(PAYMENTS), Some(39)));
    assert!(
        undeclared["help"].as_str().unwrap().contains("\"POST /refunds\" = \"keyed_write\""),
        "{undeclared}"
    );
    let read = about("POST /payments/search is declared read");
    assert_eq!((read["severity"].as_str(), read["line"].as_u64()), (Some("note"), Some(11)));

    // Without SYSTEM= a file of one system needs none; human output names the document's line.
    let (_, out, _) = ballast(&["lint", config, "--openapi", PAYMENTS]);
    assert!(out.contains(&format!("{PAYMENTS}:39")), "{out}");
}
