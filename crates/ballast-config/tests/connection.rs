//! `ballast lint` on how systems are reached: `[systems.NAME.tls]` with
//! real files (made by a test CA), `proxy`, `http2` and `[systems.NAME.auth]`
//! — each mistake an error or warning at its key, secrets never quoted.

use std::path::Path;
use std::time::Duration;

use ballast_config::{Config, Finding, ProxySetting};
use ballast_test_support::pki::Ca;

/// The findings of `text`, written as `ballast.toml` in `dir`.
fn lint(dir: &Path, text: &str) -> Vec<Finding> {
    let path = dir.join("ballast.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(&path).expect("parses").lint()
}

fn says(findings: &[Finding], severity: &str, key_line: &str, words: &str) {
    assert!(
        findings.iter().any(|f| f.severity.to_string() == severity
            && f.message.contains(words)
            && f.location.is_some()
            && f.to_string().contains(key_line)),
        "no {severity} saying {words:?} at {key_line}: {:#?}",
        findings.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
}

fn system(tls: &str) -> String {
    format!("[systems.bank]\nbase_url = \"https://10.0.0.7/api/\"\n\n[systems.bank.tls]\n{tls}")
}

#[test]
fn good_files_lint_clean_and_relative_paths_are_the_files_directory() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Bank CA");
    ca.write(dir.path(), "ca");
    ca.client("shop").write(dir.path(), "client");
    let text = system(
        "ca_file = \"ca.pem\"\nroots = \"none\"\ncert_file = \"client.pem\"\nkey_file = \"client.key\"\nserver_name = \"api.bank.example\"\nmin_version = \"1.3\"\n",
    );
    let findings = lint(dir.path(), &text);
    assert!(findings.iter().all(|f| !f.is_error()), "{findings:#?}");
    let config = Config::load(dir.path().join("ballast.toml")).unwrap();
    let tls = config.http_settings("bank").unwrap().connection.tls.unwrap();
    assert_eq!(tls.ca_file.as_deref(), Some(dir.path().join("ca.pem").as_path()));
}

#[test]
fn unreadable_mismatched_and_expired_files_are_errors_at_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Bank CA");
    ca.client("shop").write(dir.path(), "client");
    ca.client("other").write(dir.path(), "other");
    let missing = lint(dir.path(), &system("ca_file = \"missing.pem\"\n"));
    says(&missing, "error", ":5:11", "cannot read");
    let mismatched = lint(dir.path(), &system("cert_file = \"client.pem\"\nkey_file = \"other.key\"\n"));
    says(&mismatched, "error", ":6:12", "does not match");
    ca.client_expired("shop", Duration::from_secs(3600)).write(dir.path(), "old");
    let expired = lint(dir.path(), &system("cert_file = \"old.pem\"\nkey_file = \"old.key\"\n"));
    says(&expired, "error", ":5:13", "expired on");
    ca.client_until("shop", Duration::from_secs(5 * 24 * 3600)).write(dir.path(), "soon");
    let soon = lint(dir.path(), &system("cert_file = \"soon.pem\"\nkey_file = \"soon.key\"\n"));
    says(&soon, "warning", ":5:13", "day(s)");
    assert!(soon.iter().all(|f| !f.is_error()), "{soon:#?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let key = dir.path().join("client.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = lint(dir.path(), &system("cert_file = \"client.pem\"\nkey_file = \"client.key\"\n"));
        says(&open, "warning", ":6:12", "others on this machine can read it");
    }
}

#[test]
fn settings_that_cannot_go_together_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    says(&lint(dir.path(), &system("roots = \"none\"\n")), "error", ":5:9", "trusts only the ca_file");
    says(
        &lint(dir.path(), &system("roots = \"Mozilla\"\n")),
        "error",
        ":5:9",
        "not one of mozilla, system, none",
    );
    says(&lint(dir.path(), &system("cert_file = \"c.pem\"\n")), "error", ":5:13", "without key_file");
    says(&lint(dir.path(), &system("min_version = \"1.1\"\n")), "error", ":5:15", "not one of 1.2, 1.3");
    says(&lint(dir.path(), &system("server_name = \"not a name\"\n")), "error", ":5:15", "not a DNS name");
    let both = "cert_file = \"c.pem\"\nkey_file = \"c.key\"\npkcs12_file = \"c.p12\"\n";
    says(&lint(dir.path(), &system(both)), "error", ":7:15", "one client identity");
}

#[test]
fn a_pkcs12_password_is_read_from_its_variable_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        system("pkcs12_file = \"client.p12\"\npkcs12_password_env = \"BALLAST_TEST_UNSET_P12_PASSWORD\"\n");
    let findings = lint(dir.path(), &text);
    says(&findings, "warning", ":5:15", "is not set here");
}

#[test]
fn proxies_and_http2_take_only_what_works() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[systems.bank]\nbase_url = \"https://bank.example/\"\nproxy = \"http://svc:pw@proxy.corp:3128\"\nproxy_auth_env = \"PROXY_AUTH\"\nhttp2 = \"always\"\n";
    let findings = lint(dir.path(), text);
    says(&findings, "error", ":3:9", "credentials do not go in the file");
    assert!(findings.iter().all(|f| !f.message.contains(":pw@")), "the password is never quoted");
    says(&findings, "error", ":5:9", "not one of auto, never");
    let lonely = "[systems.bank]\nbase_url = \"https://bank.example/\"\nproxy_auth_env = \"PROXY_AUTH\"\n";
    says(&lint(dir.path(), lonely), "error", ":3:18", "without proxy");
    let good = "[systems.bank]\nbase_url = \"https://bank.example/\"\nproxy = \"http://proxy.corp:3128\"\nproxy_auth_env = \"PROXY_AUTH\"\nhttp2 = \"never\"\n";
    assert!(lint(dir.path(), good).iter().all(|f| !f.is_error()));
    let config = Config::load(dir.path().join("ballast.toml")).unwrap();
    let connection = config.http_settings("bank").unwrap().connection;
    assert_eq!(connection.proxy, ProxySetting::Url("http://proxy.corp:3128".into()));
    assert!(!connection.http2);
}

#[test]
fn an_oauth2_grant_needs_its_endpoint_its_client_and_a_certificate_for_tls() {
    let dir = tempfile::tempdir().unwrap();
    let base = "[systems.bank]\nbase_url = \"https://bank.example/\"\n\n[systems.bank.auth]\n";
    let missing = lint(dir.path(), &format!("{base}kind = \"oauth2\"\n"));
    says(&missing, "error", ":4:1", "no token_url");
    says(&missing, "error", ":4:1", "no client_id_env");
    says(&missing, "error", ":4:1", "needs client_secret_env");
    let tls = format!(
        "{base}kind = \"oauth2\"\ntoken_url = \"https://auth.bank.example/token\"\nclient_id_env = \"BANK_ID\"\nclient_auth = \"tls\"\n"
    );
    says(&lint(dir.path(), &tls), "error", ":8:15", "has none");
    let clear = format!(
        "{base}kind = \"oauth2\"\ntoken_url = \"http://auth.bank.example/token\"\nclient_id_env = \"BANK_ID\"\nclient_secret_env = \"BANK_SECRET\"\n"
    );
    says(&lint(dir.path(), &clear), "warning", ":6:13", "in clear");
    let twice = "[systems.bank]\nbase_url = \"https://bank.example/\"\n[systems.bank.headers]\nAuthorization = { env = \"T\" }\n[systems.bank.auth]\nkind = \"oauth2\"\ntoken_url = \"https://a.example/t\"\nclient_id_env = \"I\"\nclient_secret_env = \"S\"\n";
    says(&lint(dir.path(), twice), "error", ":4:1", "beside [auth]");
    let saml = format!("{base}kind = \"saml\"\n");
    says(&lint(dir.path(), &saml), "error", ":5:8", "not one ballast speaks");
}

#[test]
fn unknown_keys_in_the_new_sections_get_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ballast.toml");
    std::fs::write(&path, system("ca_fil = \"ca.pem\"\n")).unwrap();
    let refused = Config::load(&path).unwrap_err().to_string();
    assert!(refused.contains("ca_file"), "{refused}");
}
