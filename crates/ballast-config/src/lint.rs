//! The checker: every finding of a file, each with its rule id, severity,
//! location, message and help.

use crate::config::Config;
use crate::finding::Finding;

impl Config {
    /// Every finding of the file, in file order.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let config = Config::parse("inline.toml", "[systems.sber.retry]\nmax_attempts = 8\n").unwrap();
    /// let findings = config.lint();
    /// let re3 = findings.iter().find(|f| f.rule.map(|r| r.id()) == Some("R-RES-RE-3")).unwrap();
    /// assert_eq!(re3.location.map(|l| (l.line, l.column)), Some((2, 16)));
    /// ```
    pub fn lint(&self) -> Vec<Finding> {
        let mut problems = self.file.queue.as_ref().map(crate::queue::rules).unwrap_or_default();
        if let Some(queue) = &self.file.queue {
            let systems: Vec<&str> = self.system_names().collect();
            problems.extend(
                crate::periodic::check(
                    queue.periodic.as_ref(),
                    &systems,
                    &queue.schedule(),
                    queue.retained(),
                )
                .0,
            );
        }
        problems.extend(self.file.serve.as_ref().map(crate::serve::rules).unwrap_or_default());
        problems.extend(self.file.gateway.as_ref().map(crate::gateway::rules).unwrap_or_default());
        problems.extend(self.listeners_tls());
        problems.extend(self.file.alerts.as_ref().map(crate::alerts::rules).unwrap_or_default());
        problems.extend(self.file.telemetry.as_ref().map(crate::telemetry::rules).unwrap_or_default());
        for (name, system) in &self.file.systems {
            problems.extend(crate::systems::rules::system(self.file.around(), &self.dir(), name, system));
        }
        if self.file.systems.is_empty() {
            problems.push(crate::finding::KeyFinding::at(
                None,
                ballast::Severity::Warning,
                Vec::new(),
                "the file declares no [systems.*]: `ballast serve` would have nothing to call, and a reload to it \
                 is refused while deliveries wait"
                    .into(),
                "add a [systems.NAME] section with its base_url for each external system",
            ));
        }
        self.located(problems)
    }

    /// The TLS of both listeners: `[serve]`'s files for the admin listener
    /// and, unless `[gateway]` names its own, the gateway.
    fn listeners_tls(&self) -> Vec<crate::finding::KeyFinding> {
        let serve = self.file.serve.as_ref();
        let serve_files = serve.and_then(|s| pair(s.tls_cert_file.as_deref(), s.tls_key_file.as_deref()));
        let listen = serve.and_then(|s| s.listen.as_deref());
        let mut out = crate::listener::tls("serve", listen, serve_files, &self.dir());
        if let Some(gateway) = &self.file.gateway {
            let own = pair(gateway.tls_cert_file.as_deref(), gateway.tls_key_file.as_deref());
            // [serve]'s files serve the gateway too, checked once where they are named.
            if own.is_some() || serve_files.is_none() {
                out.extend(crate::listener::tls("gateway", gateway.listen.as_deref(), own, &self.dir()));
            }
        }
        out
    }

    /// The findings about one system (empty if it is not declared).
    pub fn lint_system(&self, name: &str) -> Vec<Finding> {
        let problems = match self.file.systems.get(name) {
            Some(system) => crate::systems::rules::system(self.file.around(), &self.dir(), name, system),
            None => Vec::new(),
        };
        self.located(problems)
    }

    fn located(&self, problems: Vec<crate::finding::KeyFinding>) -> Vec<Finding> {
        let mut findings: Vec<Finding> = problems
            .into_iter()
            .filter(|p| !self.dropped.iter().any(|d| p.path.starts_with(d)))
            .map(|p| p.locate(&self.source, &self.index))
            .collect();
        findings.sort_by(|a, b| a.location.cmp(&b.location).then(b.severity.cmp(&a.severity)));
        findings
    }
}

/// Whether any finding is an error (what `ballast lint` exits 1 on).
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(Finding::is_error)
}

/// Both of a listener's TLS files, if both are named.
fn pair<'a>(cert: Option<&'a str>, key: Option<&'a str>) -> Option<(&'a str, &'a str)> {
    Some((cert?, key?))
}
